"""Topic sources and the refresher (the log backends are tested in tests/log)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from regroup.coordinator.sources import FileTopics, TopicRefresher, open_topic_source, parse_static, sanitize
from regroup.protocol.topics import TopicMetadata


def test_static_and_file_specs(tmp_path: Path) -> None:
    assert parse_static("orders=6, payments=2") == {"orders": 6, "payments": 2}
    with pytest.raises(ValueError, match="name=partitions"):
        parse_static("orders")
    source = open_topic_source("static:a=1")
    assert source is not None and dict(source.topic_partitions()) == {"a": 1}
    path = tmp_path / "topics.json"
    path.write_text(json.dumps({"t": 3}))
    source = open_topic_source(f"file:{path}")
    assert isinstance(source, FileTopics) and dict(source.topic_partitions()) == {"t": 3}
    assert open_topic_source(None) is None
    assert open_topic_source(str(tmp_path / "log")) is not None  # a directory: the embedded log


def test_sanitize_drops_what_the_core_would_refuse() -> None:
    meta, dropped = sanitize({"ok": 2, "": 1, "zero": 0, "x" * 300: 1, "flag": True, 7: 1})
    assert meta == TopicMetadata({"ok": 2}) and len(dropped) == 5


def test_refresher_keeps_the_last_metadata_when_the_source_fails() -> None:
    calls: list[TopicMetadata] = []

    class Flaky:
        n = 0

        def topic_partitions(self) -> dict[str, int]:
            self.n += 1
            if self.n == 2:
                raise OSError("broker down")
            return {"t": self.n}

    async def main() -> None:
        r = TopicRefresher(Flaky(), calls.append, timeout_s=1)
        assert await r.refresh() and r.error == "" and r.age_ms >= 0
        assert not await r.refresh() and "broker down" in r.error
        assert await r.refresh() and r.error == ""
        r.close()

    asyncio.run(main())
    assert calls == [TopicMetadata({"t": 1}), TopicMetadata({"t": 3})]


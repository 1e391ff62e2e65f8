"""open_log: one string names a backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.embedded import EmbeddedLog
from regroup.log.errors import LogError
from regroup.log.kafka import KafkaLog


def test_paths_and_embedded_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = open_log(str(tmp_path / "a"))
    assert isinstance(plain, EmbeddedLog) and plain.directory == tmp_path / "a"
    url = open_log(f"embedded://{tmp_path}/b?fsync=never")
    assert isinstance(url, EmbeddedLog) and url.directory == tmp_path / "b"
    assert repr(url) == f"EmbeddedLog('{tmp_path / 'b'}', fsync='never')"
    monkeypatch.chdir(tmp_path)
    relative = open_log("embedded://rel/dir")
    assert isinstance(relative, EmbeddedLog) and relative.directory == tmp_path / "rel" / "dir"
    for log in (plain, url, relative):
        log.close()


def test_kafka_urls_do_not_connect_until_used() -> None:
    log = open_log("kafka://h1:9092,h2:9093?timeout_s=3&security.protocol=PLAINTEXT")
    assert isinstance(log, KafkaLog) and repr(log) == "KafkaLog('h1:9092,h2:9093')"
    log.close()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "a log spec is"),
        ("kafka://", "expected kafka://host:port"),
        ("kafka://host", "expected kafka://host:port"),
        ("kafka://h:1?timeout_s=soon", "could not convert"),
        ("embedded://", "names no directory"),
        ("embedded:///x?fsync=sometimes", "fsync must be"),
        ("embedded:///x?colour=blue", "unknown embedded-log options"),
        ("s3://bucket/x", "unknown scheme 's3'"),
    ],
)
def test_malformed_specs(spec: str, message: str) -> None:
    with pytest.raises(LogError, match=message):
        open_log(spec)

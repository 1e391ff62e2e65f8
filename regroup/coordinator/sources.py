"""Where the coordinator's topic metadata comes from, and how it is refreshed.

``--log SPEC`` names the source:

* ``static:orders=6,payments=3`` — a fixed set (tests, benchmarks, demos);
* ``file:/path/topics.json`` — a JSON object ``{"topic": partitions}`` re-read on every refresh, for
  logs regroup has no backend for (edit the file, then ``RefreshTopics``);
* anything else is handed to ``regroup.log.open_log(spec)`` (the embedded log, Kafka).

Refreshing calls the source on a thread (a log backend may block), with a timeout, on a fixed interval
and on demand; a failing source keeps the last good metadata and reports its error.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from regroup.log.base import TopicSource
from regroup.protocol.topics import TopicMetadata

log = logging.getLogger("regroup.coordinator")

#: Kafka's limit on topic names; longer names from a source are ignored.
MAX_TOPIC_NAME = 249


class StaticTopics:
    def __init__(self, partitions: Mapping[str, int]) -> None:
        self.partitions = dict(partitions)

    def topic_partitions(self) -> Mapping[str, int]:
        return self.partitions


class FileTopics:
    """A JSON file ``{"topic": partitions}``, read again on every call."""

    def __init__(self, path: str) -> None:
        self.path = path

    def topic_partitions(self) -> Mapping[str, int]:
        with open(self.path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"{self.path} must hold a JSON object {{topic: partitions}}")
        return data


def parse_static(body: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        name, sep, count = part.partition("=")
        if not sep or not name or not count.strip().isdigit():
            raise ValueError(f"static topic {part!r} must look like name=partitions")
        out[name.strip()] = int(count)
    return out


def open_topic_source(spec: str | None) -> TopicSource | None:
    """The source for ``--log SPEC`` (None: no source; the groups keep the topics they recorded)."""
    if spec is None or spec == "":
        return None
    if spec.startswith("static:"):
        return StaticTopics(parse_static(spec[len("static:"):]))
    if spec.startswith("file:"):
        return FileTopics(spec[len("file:"):])
    logmod = importlib.import_module("regroup.log")
    open_log: Callable[[str], TopicSource] | None = getattr(logmod, "open_log", None)
    if open_log is None:
        raise ValueError(f"log spec {spec!r}: this build has no log backends (regroup.log.open_log); "
                         "use static:NAME=N,... or file:PATH")
    return open_log(spec)


def sanitize(raw: Mapping[Any, Any]) -> tuple[TopicMetadata, list[str]]:
    """Metadata from what a source returned, dropping entries the core would refuse (and saying so)."""
    good: dict[str, int] = {}
    dropped: list[str] = []
    for name, count in raw.items():
        if (isinstance(name, str) and 0 < len(name) <= MAX_TOPIC_NAME and isinstance(count, int)
                and not isinstance(count, bool) and count >= 1):
            good[name] = count
        else:
            dropped.append(f"{name!r}={count!r}")
    return TopicMetadata(good), dropped


class TopicRefresher:
    """Asks the source on an interval and on demand; hands changed metadata to ``apply``."""

    def __init__(self, source: TopicSource, apply: Callable[[TopicMetadata], None] | None = None, *,
                 interval_s: float = 5.0, timeout_s: float = 10.0) -> None:
        self.source = source
        #: Where fresh metadata goes (the service's apply_topics); set before the first refresh.
        self.apply = apply
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="regroup-topics")
        self._lock = asyncio.Lock()
        self.last_ok: float | None = None
        self.error = ""
        self.on_result: Callable[[bool], None] | None = None

    @property
    def age_ms(self) -> int:
        return -1 if self.last_ok is None else int((time.monotonic() - self.last_ok) * 1000)

    async def fetch(self) -> TopicMetadata:
        """One call to the source (raises on failure or timeout)."""
        loop = asyncio.get_running_loop()
        raw = await asyncio.wait_for(loop.run_in_executor(self._executor, self.source.topic_partitions),
                                     self.timeout_s)
        meta, dropped = sanitize(raw)
        if dropped:
            log.warning("topic source returned entries regroup cannot use (ignored): %s",
                        ", ".join(dropped[:10]))
        return meta

    async def refresh(self) -> bool:
        """Fetch and apply now; concurrent callers share one fetch. True when the source answered."""
        async with self._lock:
            try:
                meta = await self.fetch()
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                log.warning("topic metadata refresh failed (keeping the last metadata): %s", self.error)
                if self.on_result is not None:
                    self.on_result(False)
                return False
            self.error = ""
            self.last_ok = time.monotonic()
            if self.apply is not None:
                self.apply(meta)
            if self.on_result is not None:
                self.on_result(True)
            return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.refresh()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

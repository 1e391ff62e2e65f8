"""The embedded log's directory: its layout, the format marker, and the topics with their partition counts.

Layout::

    regroup-log.json                 format marker (refuses to open a directory of another format)
    .meta.lock                       flock'd while a topic is created or grown
    topics/<topic>/meta.json         {"partitions": N}; replaced atomically (temp file, fsync, rename)
    topics/<topic>/<p>/log           the partition's frames, append-only (see `frames`)
    topics/<topic>/<p>/end           the committed end: (next offset, byte size) + CRC; the writer's lock
    topics/<topic>/<p>/index         sparse index: (offset, byte position) every >= 64 KiB of log
    topics/<topic>/<p>/writer        pid and host of the current writer (for error messages only)

Rules of this module:

1. Only topic metadata lives here: which topics exist and how many partitions each has. What is inside
   a partition's directory belongs to `writer` and `reader`.
2. Metadata changes (creating a topic, adding partitions, writing the marker) hold ``.meta.lock``
   across processes and replace files atomically, so a reader sees the old or the new content, never
   a mix. Reads take no lock.
3. Partition directories are created by the first writer, not by ``create_topic``: creating a topic of
   10,000 partitions writes one file, and a reader treats a partition without files as empty.
4. A partition count only ever grows, so a cached count is a final answer for every partition below it;
   anything beyond it is read fresh from ``meta.json``.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from regroup.log.embedded.files import FsyncPolicy, fsync_dir, pwrite_all
from regroup.log.embedded.frames import FORMAT_VERSION
from regroup.log.errors import (
    CorruptLogError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from regroup.log.validation import check_partition_count, check_partition_index, check_topic_name

FORMAT_NAME = "regroup-embedded-log"


class LogDirectory:
    """The root of one embedded log and its topic metadata (creates the root and marker if missing)."""

    def __init__(self, root: Path, fsync: FsyncPolicy) -> None:
        self.root = root
        self.topics_dir = root / "topics"
        self._fsync = fsync
        self._lock = threading.Lock()  # metadata changes of this process; .meta.lock for the others
        self._counts: dict[str, int] = {}
        self._init()

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.topics_dir / topic / str(partition)

    def _init(self) -> None:
        marker = self.root / "regroup-log.json"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.topics_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise LogError(f"cannot create the embedded log directory {self.root}: {e}") from e
        if marker.exists():
            try:
                meta = json.loads(marker.read_text())
                ok = meta.get("format") == FORMAT_NAME
                version = meta.get("version")
            except (OSError, ValueError, AttributeError) as e:
                raise LogError(f"{marker} is unreadable: {e}") from e
            if not ok:
                raise LogError(f"{self.root} is not an embedded regroup log ({marker} says otherwise)")
            if version != FORMAT_VERSION:
                raise LogError(
                    f"{self.root} holds format version {version}; "
                    f"this regroup reads version {FORMAT_VERSION}"
                )
            return
        with self._meta_lock():
            if not marker.exists():
                self._atomic_write(marker, {"format": FORMAT_NAME, "version": FORMAT_VERSION})

    @contextmanager
    def _meta_lock(self) -> Iterator[None]:
        """Serialise topic creation and growth across processes (blocking: these are quick)."""
        fd = os.open(self.root / ".meta.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def write_json(self, path: Path, content: Mapping[str, object]) -> None:
        """Replace ``path`` atomically (readers see the old or the new content)."""
        self._atomic_write(path, content)

    def _atomic_write(self, path: Path, content: Mapping[str, object]) -> None:
        """Replace ``path`` so that readers see the old or the new content, never a mix."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        data = (json.dumps(dict(content), sort_keys=True) + "\n").encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, data, 0)
            if self._fsync == "batch":
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if self._fsync == "batch":
            fsync_dir(path.parent)

    def _read_count(self, topic: str) -> int | None:
        try:
            raw = (self.topics_dir / topic / "meta.json").read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            count = json.loads(raw)["partitions"]
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(f"{self.topics_dir / topic / 'meta.json'} is unreadable: {e}") from e
        if not isinstance(count, int) or count < 1:
            raise CorruptLogError(f"{self.topics_dir / topic / 'meta.json'}: bad partition count {count!r}")
        return count

    def partition_count(self, topic: str) -> int:
        """The topic's partition count read fresh; :class:`UnknownTopicError` if there is no such topic."""
        count = self._read_count(topic)
        if count is None:
            raise UnknownTopicError(topic, str(self.root))
        self._counts[topic] = count
        return count

    def check_partition(self, topic: str, partition: int) -> None:
        """Raise unless ``topic``/``partition`` exists (a cached count only ever grows, so a hit is final)."""
        check_topic_name(topic)
        check_partition_index(partition)
        if partition < self._counts.get(topic, 0):
            return
        count = self.partition_count(topic)
        if partition >= count:
            raise UnknownPartitionError(topic, partition, count)

    def topic_partitions(self) -> dict[str, int]:
        """``{topic: partition count}`` for every topic, read fresh from the directory."""
        out: dict[str, int] = {}
        try:
            entries = sorted(os.listdir(self.topics_dir))
        except FileNotFoundError:
            return out
        for name in entries:
            try:
                check_topic_name(name)
            except InvalidTopicError:
                continue  # not ours (a file someone put there)
            count = self._read_count(name)
            if count is not None:  # a directory without meta.json is a topic being created
                out[name] = count
                self._counts[name] = count
        return out

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions; :class:`TopicExistsError` if it exists."""
        check_topic_name(topic)
        check_partition_count(partitions)
        with self._lock, self._meta_lock():
            existing = self._read_count(topic)
            if existing is not None:
                raise TopicExistsError(topic, existing)
            (self.topics_dir / topic).mkdir(exist_ok=True)
            if self._fsync == "batch":
                fsync_dir(self.topics_dir)
            self._atomic_write(self.topics_dir / topic / "meta.json", {"partitions": partitions})
            self._counts[topic] = partitions

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (a no-op if it has that many; shrinking is refused)."""
        check_topic_name(topic)
        check_partition_count(total, "new partition total")
        with self._lock, self._meta_lock():
            current = self.partition_count(topic)
            if total < current:
                raise InvalidPartitionsError(
                    f"topic {topic!r} has {current} partitions; partitions can only be added "
                    f"(asked for a total of {total})"
                )
            if total > current:
                self._atomic_write(self.topics_dir / topic / "meta.json", {"partitions": total})
                self._counts[topic] = total

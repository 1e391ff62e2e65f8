"""Split partitions on disk: ``layout.json``, the pieces' directories, and the split and merge procedures.

The rules of a layout (what a piece is, where a key's records are) are `layout`'s; this module keeps
them on disk and runs the procedure that changes them while producers write. Layout on disk::

    topics/<topic>/<p>/layout.json        the partition's `Layout` (absent: never split)
    topics/<topic>/<p>/layout.lock        flock'd by whoever splits or merges the partition
    topics/<topic>/<p>/pieces/<id>/       piece <id>'s files (log, end, index, writer), as `writer` keeps
                                          them; piece 0 is the partition directory itself

Rules of this module:

1. ``layout.json`` is the commit point of a split or a merge: it is replaced atomically, and only
   after the new pieces' directories exist with their first offset published, so a reader or a
   producer that sees a piece in the layout finds its files.
2. A piece is sealed at the end its writer last published, and the procedure holds the piece's
   writer lock (`writer` rule 1) from reading that end until the new layout is written: no record
   can be appended to a piece after the end it is sealed at. A producer that takes a piece's writer
   lock checks the layout afterwards (`EmbeddedLog`), so it never appends to a sealed piece.
3. The procedure first announces the change (`Layout.announce`, with a deadline): at its next
   produce call to the partition a producer lets go of every announced piece it holds, whether or
   not that call writes to it (a change of several pieces needs them all), and waits for the new
   layout if the call has records for an announced piece. If a lock is not free before the
   deadline, the change is withdrawn and the caller told who holds it. Only producers with records
   for the announced pieces wait; the others write on.
4. One change at a time per partition (``layout.lock``, taken without blocking); a crashed change
   leaves at most unpublished piece directories, which the next change removes, and an announcement
   that expires by itself.
5. Layouts are cached per partition by the file's identity (inode, size, change time), so the check
   a produce call makes costs one ``stat``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from regroup.log.embedded.directory import LogDirectory
from regroup.log.embedded.files import FsyncPolicy, fsync_dir, pwrite_all
from regroup.log.embedded.frames import pack_end
from regroup.log.embedded.layout import Layout, LayoutError
from regroup.log.embedded.writer import PartitionWriter, open_writer
from regroup.log.errors import CorruptLogError, LogError, LogTimeoutError, PartitionLockedError

LAYOUT_FILE = "layout.json"
TRIVIAL = Layout()
#: How long a split or merge waits for the writers of its pieces to let go, by default.
DEFAULT_CHANGE_TIMEOUT_S = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def piece_dir(partition_dir: Path, piece_id: int) -> Path:
    return partition_dir if piece_id == 0 else partition_dir / "pieces" / str(piece_id)


class Layouts:
    """Each partition's current layout, read through a cache keyed by the file's identity (rule 5)."""

    def __init__(self, directory: LogDirectory) -> None:
        self._dir = directory
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int], tuple[tuple[int, int, int, int], Layout]] = {}
        # Each partition's layout file as a string: building the Path costs more than the stat.
        self._paths: dict[tuple[str, int], str] = {}

    def get(self, topic: str, partition: int) -> Layout:
        key = (topic, partition)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = os.fspath(self._dir.partition_dir(topic, partition) / LAYOUT_FILE)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return TRIVIAL
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == sig:
            return hit[1]
        try:
            layout = Layout.from_json(json.loads(Path(path).read_bytes()))
        except FileNotFoundError:
            return TRIVIAL
        except (OSError, ValueError) as e:
            raise CorruptLogError(f"{path} is unreadable: {e}") from e
        with self._lock:
            self._cache[key] = (sig, layout)
        return layout

    def write(self, topic: str, partition: int, layout: Layout) -> None:
        """Replace the partition's layout file (atomically; the commit point of a change)."""
        self._dir.write_json(self._dir.partition_dir(topic, partition) / LAYOUT_FILE, layout.to_json())


class LayoutChange:
    """One split or merge of one partition (rules 2–4): announce, take the pieces, seal, publish."""

    def __init__(self, layouts: Layouts, directory: LogDirectory, fsync: FsyncPolicy,
                 topic: str, partition: int, timeout_s: float,
                 release_own: Callable[[Iterable[int]], None]) -> None:
        self.layouts = layouts
        self.fsync = fsync
        self.topic, self.partition = topic, partition
        self.pdir = directory.partition_dir(topic, partition)
        self.timeout_s = timeout_s
        self.release_own = release_own  # this process's own writers of the pieces let go first
        self.name = f"{topic}/{partition} of {directory.root}"

    def run(self, pieces: list[int], change: Callable[[Layout, dict[int, int]], Layout]) -> Layout:
        """Seal ``pieces`` at their ends and publish ``change(layout, ends)``; the new layout."""
        self.pdir.mkdir(parents=True, exist_ok=True)
        with self._change_lock():
            layout = self.layouts.get(self.topic, self.partition)
            for i in pieces:
                if not layout.piece(i).open:
                    raise LayoutError(f"piece {i} of {self.name} is sealed already")
            deadline = now_ms() + int(self.timeout_s * 1000)
            token = uuid.uuid4().hex
            base = Layout(layout.pieces, layout.generation)  # any expired announcement dropped
            self.layouts.write(self.topic, self.partition, base.announce(pieces, deadline, token))
            published = False
            writers: list[tuple[int, PartitionWriter]] = []
            try:
                self.release_own(pieces)
                for i in pieces:
                    writers.append((i, self._take(base, i, deadline)))
                ends = {i: w.next_offset for i, w in writers}
                new = change(base, ends)
                self._make_pieces(base, new)
                if now_ms() > deadline:  # producers may think it void by now (layout rule 5)
                    raise LogTimeoutError(f"the change of {self.name} ran past its deadline; withdrawn")
                self.layouts.write(self.topic, self.partition, new)
                published = True
                return new
            finally:
                for _, w in writers:
                    with w.lock:
                        w.close()
                if not published:
                    self.layouts.write(self.topic, self.partition, base)

    def _take(self, layout: Layout, piece_id: int, deadline: int) -> PartitionWriter:
        """Piece ``piece_id``'s writer lock, waiting for its producer to let go (rule 3)."""
        piece = layout.piece(piece_id)
        where = piece_dir(self.pdir, piece_id)
        delay = 0.001
        while True:
            try:
                return open_writer(where, f"{self.name} piece {piece_id}", self.fsync, piece.start)
            except PartitionLockedError as e:
                if now_ms() >= deadline:
                    raise LogTimeoutError(
                        f"cannot seal piece {piece_id} of {self.name} within {self.timeout_s:g} s: {e} "
                        "A producer lets go of a piece at its next produce call; an idle producer "
                        "must produce, call release_partition(), or close its log first.") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _make_pieces(self, old: Layout, new: Layout) -> None:
        """Rule 1: the new pieces' directories, their first offset published, before the layout."""
        known = {p.id for p in old.pieces}
        (self.pdir / "pieces").mkdir(exist_ok=True)
        for p in new.pieces:
            if p.id in known:
                continue
            where = piece_dir(self.pdir, p.id)
            shutil.rmtree(where, ignore_errors=True)  # left by a change that never published (rule 4)
            where.mkdir()
            fd = os.open(where / "end", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                pwrite_all(fd, pack_end(p.start, 0), 0)
                if self.fsync == "batch":
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.close(os.open(where / "log", os.O_WRONLY | os.O_CREAT, 0o644))
            if self.fsync == "batch":
                fsync_dir(where)
        if self.fsync == "batch":
            fsync_dir(self.pdir / "pieces")

    @contextmanager
    def _change_lock(self) -> Iterator[None]:
        fd = os.open(self.pdir / "layout.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise LogError(f"another split or merge of {self.name} is under way; try again "
                               "when it is done") from None
            yield
        finally:
            with suppress(OSError):
                os.close(fd)

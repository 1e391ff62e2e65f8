"""The few POSIX calls the embedded log makes, written once: whole writes, whole reads, directory fsyncs.

Rules: these helpers never interpret the bytes (that is `frames`), and they retry short reads and
writes, which ``os.pread``/``os.pwrite`` may return at any time, so that no caller has to.

Durability is one policy for a whole log (:data:`FsyncPolicy`):

* ``"batch"`` (the default): the log file is ``fdatasync``\\ed before the end is published and
  ``produce`` returns, so an acknowledged batch survives a power loss. Produce in batches: the fsync
  is what a produce call costs (measured figures: docs/benchmarks.md, ``regroup bench log``).
* ``"never"``: no ``fsync``; an acknowledged batch survives a crash of the process (it is in the page
  cache) but not of the machine, where the tail may be lost.

The ``end`` and ``index`` files are never fsynced under either policy: recovery rebuilds what they
say from the log itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

FsyncPolicy = Literal["batch", "never"]


def pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


def pread_exact(fd: int, size: int, position: int) -> bytes:
    """Read ``size`` bytes (fewer only at the end of the file)."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

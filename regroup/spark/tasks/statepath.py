"""Where task state lives: the state root, as paths that do the few file calls checkpoint work needs.

A task's state is its query's checkpoint, under the state root (docs/spark.md, "Where state
lives"). The root is either a local directory (a path, or a ``file:`` URI) — one machine, or a
shared filesystem mounted at the same path everywhere — or any other URI Spark can keep checkpoints
on (``hdfs://``, ``s3a://``, …), which is reached through Hadoop's FileSystem API in the driver's
JVM (`regroup.spark.tasks.hadoop`). Both are a `StatePath`, so the checkpoint rules
(`regroup.spark.tasks.checkpoint`) and the pipeline are written once; a local root keeps plain
Python file calls, with no JVM round trip per file.

A path without a scheme is always local, whatever Hadoop's ``fs.defaultFS`` says: Spark is given
the ``file://`` URI of it, so that the queries' checkpoints and the copies made here are the same
files. (Write ``hdfs:///dir`` for a directory of the default HDFS.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

__all__ = ["LocalPath", "StatePath", "StateRootError", "is_local", "local_run_directory", "open_state_root",
           "state_path"]


class StateRootError(RuntimeError):
    """The state root cannot be used (a URI no filesystem serves, a filesystem that cannot be
    reached or written); the message names the root."""


class StatePath(Protocol):
    """A file or directory under the state root. Relative parts are joined with ``/``. Missing
    files raise `FileNotFoundError`, as with `pathlib`."""

    @property
    def name(self) -> str: ...

    @property
    def uri(self) -> str:
        """The location as Spark is given it (``checkpointLocation``)."""
        ...

    def __truediv__(self, part: str) -> StatePath: ...

    def with_name(self, name: str) -> StatePath: ...

    def exists(self) -> bool: ...

    def is_dir(self) -> bool: ...

    def iterdir(self) -> list[StatePath]: ...

    def files(self) -> list[tuple[str, StatePath]]:
        """Every file below this directory, with its path relative to it (``a/b``); none when the
        directory is missing. A file removed meanwhile may still be listed (its copy then raises
        `FileNotFoundError`)."""
        ...

    def read_text(self) -> str: ...

    def write_text(self, text: str) -> None:
        """Write the whole file (replacing it, not atomically), making its parent directories."""
        ...

    def mkdir(self) -> None:
        """Make this directory and its parents; nothing when it exists."""
        ...

    def copy_to(self, target: StatePath) -> None:
        """Copy this file to ``target`` (of the same root), making its parent directories."""
        ...

    def rename_to(self, target: StatePath) -> None:
        """Move this file or directory to ``target``, which must not exist (the caller checks)."""
        ...

    def remove(self) -> None:
        """Remove this file or directory and everything below it; nothing when it is missing."""
        ...


@dataclass(frozen=True)
class LocalPath:
    """A `StatePath` in a local (or locally mounted) directory: Python's own file calls."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def uri(self) -> str:
        # Not Path.as_uri(): it percent-encodes, and Hadoop's Path takes the string as it is.
        return f"file://{self.path.absolute()}"

    def __truediv__(self, part: str) -> LocalPath:
        return LocalPath(self.path / part)

    def with_name(self, name: str) -> LocalPath:
        return LocalPath(self.path.with_name(name))

    def exists(self) -> bool:
        return self.path.exists()

    def is_dir(self) -> bool:
        return self.path.is_dir()

    def iterdir(self) -> list[StatePath]:
        return [LocalPath(p) for p in self.path.iterdir()]

    def files(self) -> list[tuple[str, StatePath]]:
        out: list[tuple[str, StatePath]] = []
        for directory, _, names in os.walk(self.path):
            rel = Path(directory).relative_to(self.path)
            for name in names:
                out.append(((rel / name).as_posix(), LocalPath(Path(directory) / name)))
        return sorted(out, key=lambda f: f[0])

    def read_text(self) -> str:
        return self.path.read_text()

    def write_text(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text)

    def mkdir(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def copy_to(self, target: StatePath) -> None:
        assert isinstance(target, LocalPath), target
        target.path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.path, target.path)

    def rename_to(self, target: StatePath) -> None:
        assert isinstance(target, LocalPath), target
        self.path.rename(target.path)  # rename(2): atomic, for a directory too

    def remove(self) -> None:
        if self.path.is_dir():
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            self.path.unlink(missing_ok=True)


def is_local(location: str | os.PathLike[str]) -> bool:
    """Whether a state root is a local directory: a path without a scheme, or a ``file:`` URI."""
    text = os.fspath(location)
    scheme = urlsplit(text).scheme
    return scheme == "" or scheme.lower() == "file"


def state_path(location: str | os.PathLike[str] | StatePath) -> StatePath:
    """A `StatePath` for a local location (checkpoint functions also take plain paths); remote
    ones need the driver's JVM: `open_state_root`."""
    if not isinstance(location, (str, os.PathLike)):
        return location
    text = os.fspath(location)
    if not isinstance(location, str):  # a pathlib.Path is local, even with a colon in it
        return LocalPath(Path(text))
    if not is_local(text):
        raise StateRootError(f"{text} is not a local path: open it with open_state_root(spark, ...)")
    parts = urlsplit(text)
    if parts.scheme.lower() == "file":
        if parts.netloc not in ("", "localhost"):
            raise StateRootError(f"state root {text}: a file: URI names a local path (file:///dir), "
                                 f"not a host ({parts.netloc})")
        return LocalPath(Path(parts.path))
    return LocalPath(Path(text))


def open_state_root(spark: Any, location: str | os.PathLike[str]) -> StatePath:
    """The state root at ``location``, made if missing and checked: a local directory, or a
    directory of a Hadoop filesystem reached through ``spark``'s JVM. Raises `StateRootError`
    naming the location when it cannot be used."""
    text = os.fspath(location)
    if not isinstance(location, str) or is_local(text):
        root = state_path(location)
        try:
            root.mkdir()
        except OSError as e:
            raise StateRootError(f"state root {text}: cannot make the directory: {e}") from None
        return root
    from regroup.spark.tasks.hadoop import open_hadoop_root

    return open_hadoop_root(spark, text)


def local_run_directory(spark: Any, group_root: StatePath) -> Path:
    """Where a member keeps the control files it shares with its queries' readers (processes Spark
    starts on the driver's machine, `regroup.spark.tasks.control`): they must be local files.
    Under a local root, ``run/`` in it, as always; under a remote one, the driver's Spark scratch
    directory (``SparkFiles.getRootDirectory()``, under ``spark.local.dir``, removed when the
    application ends), else the system's temporary directory."""
    if isinstance(group_root, LocalPath):
        return group_root.path / "run"
    try:
        scratch = Path(str(spark._jvm.org.apache.spark.SparkFiles.getRootDirectory()))
    except Exception:  # no JVM to ask (a stand-in session): any local directory will do
        scratch = Path(tempfile.gettempdir())
    return scratch / "regroup-run" / group_root.name

"""File work on Spark checkpoints for task queries: copy the batch of record, read batches' offsets.

Rule 2 of `regroup.protocol.streams.checkpoints`: a member runs a query only on a directory it
created, so moving a task's state is copying one batch of its checkpoint into a new directory:

* the offset log and the commit log up to that batch (Spark re-runs a batch whose offsets are
  logged but not committed, from the same offsets: that is how a batch interrupted by a crash is
  finished by the next owner);
* the state-store files of the versions that batch can need (a batch's state version is its id
  plus one; newer versions, written by batches the coordinator has not accepted, are left out);
* everything that is not per batch or per version (the query's metadata, with a new query id so
  that two copies can run in one Spark application; state schemas; RocksDB's shared SST files).

Spark writes every file of a checkpoint by renaming a finished temporary file, and removes old
versions in the background; a file that vanishes during the copy makes the copy start again.

The file calls go through `StatePath` (`regroup.spark.tasks.statepath`): a local directory, or any
Hadoop filesystem through the driver's JVM. The functions also take a plain local path.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import PurePosixPath

from regroup.protocol.microbatch import parse_shard_key
from regroup.protocol.shard import Shard
from regroup.protocol.streams.checkpoints import state_file_version
from regroup.spark.tasks.statepath import StatePath, state_path

__all__ = ["CheckpointError", "batch_ends", "copy_batch", "last_committed_batch", "lineage_begin"]

_COPY_ATTEMPTS = 5

#: A checkpoint directory: a `StatePath`, or a local path.
Location = StatePath | str | os.PathLike[str]


class CheckpointError(RuntimeError):
    """A checkpoint cannot be read or copied (missing, corrupt, or written by another source)."""


def _batch_ids(log_dir: StatePath) -> list[int]:
    try:
        entries = log_dir.iterdir()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(p.name) for p in entries if p.name.isdigit())


def last_committed_batch(checkpoint: Location) -> int | None:
    """The last batch Spark finished (its commit log), or None before the first one."""
    ids = _batch_ids(state_path(checkpoint) / "commits")
    return ids[-1] if ids else None


def batch_ends(checkpoint: Location, batch: int) -> dict[Shard, int] | None:
    """The end offsets the task source logged for ``batch`` (None if the batch is not logged).

    An offset-log file is ``v1``, a line of batch metadata, then one line per source: ours is the
    JSON `regroup.spark.tasks.source` returns from ``latestOffset``."""
    logged = _logged(checkpoint, batch)
    return None if logged is None else logged[0]


def lineage_begin(checkpoint: Location, batch: int) -> dict[Shard, int] | None:
    """Where the checkpoint's first batch began, as logged with ``batch`` (None: not logged, or
    logged by a version that did not record it). A query started on a copy must be given it: Spark
    runs an unfinished batch 0 again from the source's initial offset, not from the log."""
    logged = _logged(checkpoint, batch)
    return None if logged is None else logged[1]


def _logged(checkpoint: Location, batch: int) -> tuple[dict[Shard, int], dict[Shard, int] | None] | None:
    path = state_path(checkpoint) / "offsets" / str(batch)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise CheckpointError(f"{path} is not a Spark offset log entry")
    try:
        raw = json.loads(lines[2])
        if isinstance(raw, str):  # Python data sources' offsets are logged as a JSON string
            raw = json.loads(raw)
        if raw.get("v") != 1:
            raise ValueError(f"offset version {raw.get('v')!r}, want 1")
        ends = _positions(raw["ends"])
        begin = _positions(raw["begin"]) if "begin" in raw else None
        return ends, begin
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: the task source's offset is unreadable ({e}); "
                              "was this checkpoint written by another query?") from None


def _positions(raw: dict[str, object]) -> dict[Shard, int]:
    out: dict[Shard, int] = {}
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"offset {v!r} of {k} is not an integer >= 0")
        out[parse_shard_key(k)] = v
    return out


def copy_batch(source: Location, target: Location, batch: int) -> None:
    """Copy ``batch`` of the checkpoint at ``source`` into the new directory ``target`` (see the
    module docstring). ``target`` must not exist; it appears only complete (copied into a temporary
    directory beside it, then renamed: atomic on a local disk and HDFS, see
    `regroup.spark.tasks.hadoop` for object stores)."""
    source, target = state_path(source), state_path(target)
    if target.exists():
        raise CheckpointError(f"cannot copy a checkpoint into {target}: it exists")
    if not (source / "offsets" / str(batch)).exists():
        raise CheckpointError(f"{source} has no batch {batch} in its offset log (removed already, or "
                              "not this task's checkpoint)")
    temporary = target.with_name(target.name + ".copying")
    try:
        for attempt in range(_COPY_ATTEMPTS):
            temporary.remove()
            try:
                _copy_once(source, temporary, batch)
            except FileNotFoundError:
                if attempt == _COPY_ATTEMPTS - 1:
                    raise CheckpointError(f"{source} kept changing while it was copied "
                                          f"({_COPY_ATTEMPTS} attempts)") from None
                continue
            temporary.rename_to(target)
            return
    finally:
        temporary.remove()


def _copy_once(source: StatePath, target: StatePath, batch: int) -> None:
    committed = [b for b in _batch_ids(source / "commits") if b <= batch]
    newest_version = (committed[-1] + 1) if committed else 0
    for name, path in source.files():
        rel = PurePosixPath(name)
        if not _wanted(rel, batch, newest_version):
            continue
        if name == "metadata":
            _write_metadata(path, target / name)
        else:
            path.copy_to(target / name)
    for log in ("offsets", "commits"):
        (target / log).mkdir()


def _wanted(rel: PurePosixPath, batch: int, newest_version: int) -> bool:
    name = rel.name
    if name.endswith(".tmp") or ".tmp." in name or (name.startswith(".") and name.endswith(".tmp.crc")):
        return False  # Spark's temporary files: not written completely
    if rel.parts[0] in ("offsets", "commits") and len(rel.parts) == 2:
        bare = name[1:-4] if name.startswith(".") and name.endswith(".crc") else name
        return not bare.isdigit() or int(bare) <= batch
    if rel in (PurePosixPath("metadata"), PurePosixPath(".metadata.crc")):
        return rel == PurePosixPath("metadata")  # rewritten (new id): its old checksum would not match
    if rel.parts[0] == "state":
        version = state_file_version(name)
        return version is None or version <= newest_version
    return True


def _write_metadata(path: StatePath, out: StatePath) -> None:
    """The query's metadata with a new query id (Spark refuses two active queries with one id)."""
    try:
        meta = json.loads(path.read_text())
    except ValueError as e:
        raise CheckpointError(f"{path} is not a Spark checkpoint's metadata: {e}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path} is not a Spark checkpoint's metadata: not a JSON object")
    meta["id"] = str(uuid.uuid4())
    out.write_text(json.dumps(meta))

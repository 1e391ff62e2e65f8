"""The channel between a task query's member (in the application's driver process) and the query's
reader (a separate Python process Spark starts): a small JSON file per query, replaced atomically.

The member writes `Control` — how far the reader may read (``limit``, None = to the log's end) and
whether it must stop planning batches (``gate``). The reader reads it each time Spark asks for the
next offset, and when it obeys a gate it writes an acknowledgement naming the gate's generation:
Spark asks for the next offset only once the previous batch has finished, so from then on no batch
of that query is running or will start, and the member can stop the query with nothing half done.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from regroup.protocol.microbatch import parse_shard_key, shard_key
from regroup.protocol.shard import Shard

__all__ = ["Control", "read_ack", "read_control", "write_ack", "write_control"]


@dataclass(frozen=True, slots=True)
class Control:
    generation: int = 0
    limit: dict[Shard, int] | None = None
    gate: bool = False


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a name per writer
    tmp.write_text(text)
    os.replace(tmp, path)


def write_control(path: Path, control: Control) -> None:
    limit = None if control.limit is None else {shard_key(s): o for s, o in sorted(control.limit.items())}
    _replace(path, json.dumps({"generation": control.generation, "limit": limit, "gate": control.gate}))


def read_control(path: Path) -> Control:
    """The member's latest word; a missing file means no limit and no gate (the member writes the
    file before it starts the query, so this only happens to a query started by hand)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return Control()
    limit = raw.get("limit")
    return Control(int(raw.get("generation", 0)),
                   None if limit is None else {parse_shard_key(k): int(v) for k, v in limit.items()},
                   bool(raw.get("gate", False)))


def _ack_path(path: Path) -> Path:
    return path.with_name(path.name + ".ack")


def write_ack(path: Path, generation: int) -> None:
    _replace(_ack_path(path), json.dumps({"generation": generation}))


def read_ack(path: Path) -> int:
    try:
        return int(json.loads(_ack_path(path).read_text())["generation"])
    except (FileNotFoundError, ValueError, KeyError):
        return -1

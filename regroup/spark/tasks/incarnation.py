"""Which process a Spark member of a streams group is, across restarts, and the run directories of
its incarnations.

A static member keeps its process id (a file under the state root, by instance id), so that the
checkpoint copies it left on disk are known to be its own (`regroup.protocol.streams.checkpoints`
rule 3: resumed in place); a dynamic member is a new process every time. Each incarnation keeps the
control files of its queries' readers in a directory of its own, removed when it stops; those of
incarnations that ended without cleaning up (kill -9) are removed once they are old.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import uuid
from pathlib import Path

from regroup.spark.tasks.statepath import StatePath

__all__ = ["process_id", "remove_stale_runs"]


def process_id(root: StatePath, instance_id: str | None) -> str:
    """A static member keeps its process id (so its copies on disk are known to be its own); a
    dynamic member is a new process every time."""
    if instance_id is None:
        return uuid.uuid4().hex
    name = hashlib.sha256(instance_id.encode()).hexdigest()[:32]  # any instance id is a safe file name
    path = root / "members" / f"{name}.process-id"
    try:
        if known := path.read_text().strip():
            return known
    except FileNotFoundError:
        pass
    pid = uuid.uuid4().hex
    tmp = path.with_name(f"{name}.{pid}.tmp")
    tmp.write_text(pid + "\n")
    path.remove()  # an empty file left by a crash (a rename does not replace a file on HDFS)
    tmp.rename_to(path)
    return pid


#: An incarnation's control files left this long ago belong to a member that is gone.
_STALE_RUN_S = 3600.0


def remove_stale_runs(directory: Path) -> None:
    """Remove the control files of earlier incarnations that ended without cleaning up (kill -9),
    not those of one that may still be stopping."""
    if not directory.is_dir():
        return
    for d in directory.iterdir():
        try:
            if time.time() - d.stat().st_mtime > _STALE_RUN_S:
                shutil.rmtree(d, ignore_errors=True)
        except FileNotFoundError:
            pass

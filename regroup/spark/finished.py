"""Which micro-batches finished: what the driver's listener tells a stopping query's reader.

Spark commits a batch to the source one trigger late and never after the last one: a ``query.stop()``
between a finished batch and the next trigger would leave that batch uncommitted at the coordinator,
and the partitions' next owners would read it again. The reader (a separate Python process, ended by
SIGTERM) cannot tell by itself whether its last planned batch finished; Spark's progress events can —
a ``QueryProgressEvent`` is posted only after the batch's sink finished and its commit was written to
the checkpoint, and it carries the source's end offset as the reader returned it.

So the channel is a directory on the driver's host, shared by the two processes:

* every end offset the reader plans carries the reader's random token (``"reader"``, ignored by
  `BatchOffset.from_json`);
* `regroup.spark.startup.FinishedBatchListener`, a `StreamingQueryListener` in the driver's Python
  process added by `regroup.spark.register`, calls `record_finished` on each progress event: it writes
  ``<dir>/<token>.json``, the last finished end offset of that reader, and `record_terminated`
  marks it ``terminated`` once the query run ended (events reach a listener in
  order, so after ``terminated`` no more finished batches of that run can come);
* on SIGTERM, the reader (`wait_finished`) commits its last planned batch only if the file names
  exactly that end offset as finished — it waits (bounded) while neither that nor ``terminated`` was
  written. A commit never claims a batch that did not finish; when in doubt (no listener, a timeout)
  the reader leaves without committing, as before: at least once.

The directory reaches the reader's process in its environment (`ENV`), set by `regroup.spark.register`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

#: The environment variable naming the directory, in the source's Spark Python processes.
ENV = "REGROUP_SPARK_FINISHED_DIR"
#: The key of the reader's token in the end offsets it plans.
TOKEN_KEY = "reader"
#: How long a stopping reader waits for the listener's word on its last planned batch.
STOP_WAIT_S = 5.0

_TOKEN = re.compile(r"[0-9a-f]{16,64}")


def token_of(offset: object) -> str | None:
    """The reader token an end offset carries (None: not ours, or from before tokens)."""
    if not isinstance(offset, dict):
        return None
    token = offset.get(TOKEN_KEY)
    return token if isinstance(token, str) and _TOKEN.fullmatch(token) else None


def _path(directory: str | Path, token: str) -> Path:
    return Path(directory) / f"{token}.json"


def _write(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def read(directory: str | Path, token: str) -> dict[str, Any] | None:
    """What the listener wrote for ``token`` (None: nothing yet)."""
    try:
        record = json.loads(_path(directory, token).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def wait_finished(directory: str | Path, end: dict[str, Any], timeout: float = STOP_WAIT_S) -> bool:
    """True once the listener reported the batch ending at ``end`` finished; False when it reported
    the query run terminated without it, or after ``timeout`` seconds. Removes the reader's file."""
    token = token_of(end)
    if token is None:
        return False
    deadline = time.monotonic() + timeout
    try:
        while True:
            record = read(directory, token)
            if record is not None:
                if record.get("finished") == end:
                    return True
                if record.get("terminated"):
                    return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
    finally:
        with contextlib.suppress(OSError):
            _path(directory, token).unlink()


def record_finished(directory: str | Path, raw_end: str | None) -> str | None:
    """A progress event's source end offset ``raw_end`` finished: write it for its reader; the
    reader's token (None: not a regroup offset with a token)."""
    if not raw_end or TOKEN_KEY not in raw_end:
        return None
    try:
        end = json.loads(raw_end)
    except ValueError:
        return None
    token = token_of(end)
    if token is not None:
        _write(_path(directory, token), {"finished": end})
    return token


def record_terminated(directory: str | Path, token: str) -> None:
    """The query run of reader ``token`` ended: no more finished batches will come for it."""
    record = read(directory, token)
    if record is not None:  # else the reader has decided already (and removed it)
        _write(_path(directory, token), {**record, "terminated": True})

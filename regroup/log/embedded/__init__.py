"""The embedded log: a durable, partitioned, append-only log in a local directory.

It is regroup's default log, for everything on one machine: a producer process appends, while consumer
processes and Spark executors read the same partitions concurrently. There is no server; processes
coordinate through the files alone: one writer per partition (an ``flock``), any number of readers
that lock nothing and never look past the end the writer last published.

One module per job, each opening with the rules it keeps:

* `frames` — the on-disk format: frames (header, CRC, columnar body), the end record, index entries.
* `files` — whole ``pread``/``pwrite`` calls, directory fsyncs, and the durability policy (``fsync``).
* `directory` — the directory's layout, its format marker, topics and their partition counts.
* `writer` — one partition's single writer: the append path, torn-tail recovery, the sparse index.
* `reader` — one partition's readers: committed end, seek hints, the frame scan, decoding records.
* `arrow` — ``read_arrow``'s batches, built from the frames' columns.
* `log` — :class:`EmbeddedLog`, the facade every caller uses.

Throughput is measured by ``regroup bench log``; the figures are in docs/benchmarks.md.

Left out on purpose: segments and retention (one file per partition, which grows forever), compaction,
and deleting topics. The format has a version in ``regroup-log.json`` so segments can come later.
"""

from __future__ import annotations

from regroup.log.embedded.files import FsyncPolicy
from regroup.log.embedded.log import EmbeddedLog
from regroup.log.embedded.reader import DEFAULT_MAX_READ_BYTES

__all__ = ["DEFAULT_MAX_READ_BYTES", "EmbeddedLog", "FsyncPolicy"]

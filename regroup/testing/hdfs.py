"""A real HDFS beside regroup, for tests: one NameNode and one DataNode in one JVM (Hadoop's own
MiniDFSCluster), on loopback.

The cluster is Hadoop's (``org.apache.hadoop:hadoop-client-minicluster``, :data:`HADOOP_VERSION` —
the release of the Hadoop client PySpark bundles), run from a classpath of jars that
``scripts/hdfs/fetch.sh`` (called by ``scripts/setup.sh``) fetches from Maven Central into
``.cache/hdfs/<version>/lib``, with the launcher it compiles from ``scripts/hdfs/MiniHdfs.java`` into
``.cache/hdfs/<version>/classes``; ``REGROUP_HDFS_HOME`` points at another directory holding
``lib/`` and ``classes/``. Java 17 or newer runs it (``JAVA_HOME``, else ``java`` on the ``PATH``).

:func:`start_hdfs` starts it in a fresh directory on free loopback ports and returns once the
NameNode serves and the DataNode has registered; :attr:`MiniHdfs.uri` (``hdfs://127.0.0.1:PORT``)
is what Spark and Hadoop clients are given. :meth:`MiniHdfs.stop` closes the launcher's standard
input (it shuts the cluster down cleanly), kills it if it does not exit in time, and removes its
directory::

    with start_hdfs() as hdfs:
        root = f"{hdfs.uri}/state"

The launcher also exits when its standard input ends because this process died, so a killed test
run leaves no cluster behind (its directory stays).

By hand: ``python -m regroup.testing.hdfs`` starts one, prints its URI and runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from regroup.testing.serving import log_tail, serve_until_signal

__all__ = ["HADOOP_VERSION", "HdfsStartError", "HdfsUnavailableError", "MiniHdfs", "hdfs_home", "start_hdfs"]

#: The Hadoop release started (scripts/hdfs/pom.xml's ``hadoop.version`` must say the same).
HADOOP_VERSION = "3.5.0"
#: A directory with ``lib/`` (jars) and ``classes/`` (the compiled launcher) to run instead.
HOME_ENV = "REGROUP_HDFS_HOME"

_REPO_ROOT = Path(__file__).resolve().parents[2]

_JVM_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # starts faster; a test cluster moves little data
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)


class HdfsUnavailableError(RuntimeError):
    """Hadoop's jars, the launcher or Java are missing: nothing was started."""


class HdfsStartError(RuntimeError):
    """The cluster was started but did not come up (the message ends with its log)."""


def hdfs_home() -> Path:
    """Where the jars and the launcher are: ``$REGROUP_HDFS_HOME``, else ``.cache/hdfs/<version>``."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    return _REPO_ROOT / ".cache" / "hdfs" / HADOOP_VERSION


def _classpath(home: Path) -> str:
    lib, classes = home / "lib", home / "classes"
    if not (lib / f"hadoop-client-minicluster-{HADOOP_VERSION}.jar").is_file() or \
            not (classes / "MiniHdfs.class").is_file():
        raise HdfsUnavailableError(
            f"Hadoop {HADOOP_VERSION}'s MiniDFSCluster or its launcher is not in {home}; fetch them with "
            f"`bash scripts/hdfs/fetch.sh` (scripts/setup.sh does), or point {HOME_ENV} at a directory "
            "with lib/ and classes/")
    return os.pathsep.join([str(classes), str(lib / "*")])


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise HdfsUnavailableError("Java (17 or newer) was not found; the HDFS cluster needs it")
    return found


@dataclass
class MiniHdfs:
    """A running single-node HDFS (started by :func:`start_hdfs`)."""

    #: ``hdfs://127.0.0.1:PORT``: the NameNode, for Spark and any Hadoop client.
    uri: str
    #: The cluster's directory: ``hdfs.log`` and ``data/`` (removed on stop).
    work_dir: Path
    process: subprocess.Popen[bytes]
    #: Seconds from the call of :func:`start_hdfs` until the cluster served.
    start_seconds: float
    keep_files: bool = False

    @property
    def log_path(self) -> Path:
        return self.work_dir / "hdfs.log"

    @property
    def port(self) -> int:
        return int(self.uri.rpartition(":")[2])

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """End the launcher's input (a clean shutdown), SIGKILL after ``timeout_s``; then remove its
        directory. Returns the exit status. Idempotent."""
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self.keep_files:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return proc.returncode

    def __enter__(self) -> MiniHdfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_hdfs(
    *,
    port: int = 0,
    heap_mb: int = 384,
    parent_dir: str | Path | None = None,
    timeout_s: float = 180.0,
    keep_files: bool = False,
) -> MiniHdfs:
    """Start a single-node HDFS and wait until it serves.

    ``port`` is the NameNode's (0: a free one, chosen by the NameNode itself, so no race); the
    DataNode and the web servers always take free ports. The cluster's directory is created under
    ``parent_dir`` (the system's temporary directory by default) and removed by
    :meth:`MiniHdfs.stop` unless ``keep_files``. Raises :class:`HdfsUnavailableError` when the jars,
    the launcher or Java are missing, :class:`HdfsStartError` when the cluster does not serve within
    ``timeout_s``.
    """
    t0 = time.monotonic()
    cp = _classpath(hdfs_home())
    java = _java()
    work_dir = Path(tempfile.mkdtemp(prefix="regroup-hdfs-", dir=parent_dir))
    log_path = work_dir / "hdfs.log"
    with open(log_path, "ab") as log:  # appended to by its stdout too (below)
        proc = subprocess.Popen(
            [java, f"-Xmx{heap_mb}m", *_JVM_OPTIONS, f"-Dtest.build.data={work_dir / 'data'}",
             "-cp", cp, "MiniHdfs", str(work_dir / "data"), str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
            cwd=work_dir,  # anything Hadoop writes relative to the working directory stays in there
        )
    hdfs = MiniHdfs("", work_dir, proc, 0.0, keep_files)
    try:
        hdfs.uri = _wait_until_ready(proc, t0 + timeout_s, log_path)
    except BaseException:
        hdfs.keep_files = True  # the message quotes the log; the directory goes below unless asked
        hdfs.stop(timeout_s=5.0)
        if not keep_files:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    hdfs.start_seconds = time.monotonic() - t0
    return hdfs


def _wait_until_ready(proc: subprocess.Popen[bytes], deadline: float, log: Path) -> str:
    """The URI the launcher prints once the cluster serves (it waits for the DataNode itself). Its
    standard output is drained into the log from then on, so that it never blocks on a full pipe."""
    ready: list[str] = []
    printed = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        with open(log, "ab") as out:
            for line in proc.stdout:
                if not ready and line.startswith(b"ready hdfs://"):
                    ready.append(line.decode().split(" ", 1)[1].strip())
                    printed.set()
                else:
                    out.write(line)
                    out.flush()
        printed.set()  # the launcher exited

    threading.Thread(target=drain, name="regroup-hdfs-stdout", daemon=True).start()
    printed.wait(max(0.0, deadline - time.monotonic()))
    if ready:
        return ready[0]
    if proc.poll() is not None:
        raise HdfsStartError(
            f"the HDFS cluster exited with {proc.returncode} while starting:\n{log_tail(log)}")
    raise HdfsStartError(f"the HDFS cluster did not serve in time:\n{log_tail(log)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m regroup.testing.hdfs",
        description=f"Start a single-node HDFS (Hadoop {HADOOP_VERSION}'s MiniDFSCluster) on loopback and "
                    "run it until Ctrl-C; its files are removed when it stops.")
    parser.add_argument("--port", type=int, default=0, help="the NameNode's port (default: a free one)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (log, data)")
    args = parser.parse_args(argv)
    try:
        hdfs = start_hdfs(port=args.port, keep_files=args.keep)
    except (HdfsUnavailableError, HdfsStartError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"HDFS (Hadoop {HADOOP_VERSION}) serving at {hdfs.uri}; started in {hdfs.start_seconds:.1f} s; "
          f"log {hdfs.log_path}; Ctrl-C stops it", flush=True)
    return serve_until_signal(hdfs.process, hdfs.stop, args.keep, hdfs.work_dir)


if __name__ == "__main__":
    sys.exit(main())

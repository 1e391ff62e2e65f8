"""Kafka's own Java assignors on regroup's grid cells: the other side of ``bench assignors --java``.

The harness (scripts/kafka/assignors: one class, `AssignorBench`, and a pom.xml pinning
``kafka-group-coordinator``) is built with Maven on first use into
``.cache/kafka/assignors/<hash of its sources>/`` and then reused; a fresh machine needs only Java
17+ and Maven (Maven fetches the Kafka jars from Maven Central). `JavaAssignors` keeps one JVM
running for a whole grid so that the JIT's work carries over between cells; each cell is still
warmed on its own input (until both a time and a call count are reached) before it is timed.

Inputs mirror `regroup.bench.assignors.build_spec`: the same member ids, topic names, partition
counts, 5-bucket heterogeneous layout and incremental "one member joins a balanced group"; members
of a bucket share one topic-id set, as regroup's members share one frozenset. Topic metadata is a
plain map behind Kafka's ``CoordinatorMetadataImage`` interface (Kafka's JMH benchmark wraps a
``MetadataImage``; the assignors look a topic up once per topic, not per partition).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

_REPO_ROOT = Path(__file__).resolve().parents[2]
HARNESS_SOURCES = _REPO_ROOT / "scripts" / "kafka" / "assignors"
MAIN_CLASS = "dev.regroup.bench.AssignorBench"

#: Per cell: warm up for at least this long and this many calls, then time for at least this long
#: and this many runs (at most ``max_runs``). The JIT needs on the order of a hundred calls of a
#: mid-sized cell before ``assign()`` runs at full speed.
WARMUP_MS = 2000.0
WARMUP_CALLS = 20
MEASURE_MS = 1000.0
MIN_RUNS = 5
MAX_RUNS = 200


class JavaUnavailable(RuntimeError):
    """Java or Maven is missing, or the harness did not build."""


def _cache_root() -> Path:
    env = os.environ.get("REGROUP_KAFKA_CACHE")
    return (Path(env) if env else _REPO_ROOT / ".cache" / "kafka") / "assignors"


def sources_hash() -> str:
    """A hash of the harness's sources (pom.xml and the Java files): the build cache key."""
    h = hashlib.sha256()
    files = [HARNESS_SOURCES / "pom.xml", *sorted((HARNESS_SOURCES / "src").rglob("*.java"))]
    for f in files:
        h.update(str(f.relative_to(HARNESS_SOURCES)).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _built(out: Path) -> bool:
    return (out / "assignor-bench.jar").is_file() and (out / "lib").is_dir()


def build_harness(quiet: bool = True) -> Path:
    """The directory holding ``assignor-bench.jar`` and ``lib/``, built with Maven if needed."""
    out = _cache_root() / sources_hash()
    if _built(out):
        return out
    if shutil.which("java") is None:
        raise JavaUnavailable("`java` was not found; the Java comparison needs Java 17+")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JavaUnavailable("`mvn` was not found; the Java comparison builds its harness with Maven "
                              "(e.g. sudo apt-get install maven)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds at once: the second finds the first's
        if _built(out):
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=out.parent))
        try:
            proc = subprocess.run(
                [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(HARNESS_SOURCES / "pom.xml"),
                 f"-Dharness.out={tmp}", "package"],
                capture_output=True, text=True, check=False)
            if proc.returncode != 0 or not _built(tmp):
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
                raise JavaUnavailable(f"building the Java assignor harness failed:\n{tail}")
            for scratch in ("classes", "generated-sources", "maven-archiver", "maven-status"):
                shutil.rmtree(tmp / scratch, ignore_errors=True)
            tmp.rename(out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass(frozen=True)
class JavaCell:
    """One cell timed in Java (ms per assignment) and what the assignment covered."""

    best_ms: float
    median_ms: float
    best_cpu_ms: float  # the timing thread's CPU time (ThreadMXBean), best of runs
    runs: int
    warmup_runs: int
    partitions: int
    assigned: int
    members_out: int


class JavaAssignors:
    """One JVM running the harness; `measure` times one cell in it.

    Use as a context manager. ``info`` holds the Java and Kafka versions the JVM reported.
    """

    def __init__(self, warmup_ms: float = WARMUP_MS, measure_ms: float = MEASURE_MS,
                 min_runs: int = MIN_RUNS, max_runs: int = MAX_RUNS,
                 warmup_calls: int = WARMUP_CALLS, jvm_args: tuple[str, ...] = ()) -> None:
        home = build_harness()
        cp = f"{home / 'assignor-bench.jar'}{os.pathsep}{home / 'lib' / '*'}"
        self._proc: subprocess.Popen[str] | None = subprocess.Popen(
            ["java", *jvm_args, "-cp", cp, MAIN_CLASS, str(warmup_ms), str(measure_ms),
             str(min_runs), str(max_runs), str(warmup_calls)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.info: dict[str, Any] = json.loads(self._readline())

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        if self._proc is None or self._proc.stdin is None or self._proc.stdout is None:
            raise JavaUnavailable("the Java assignor harness is not running")
        return self._proc.stdin, self._proc.stdout

    def _readline(self) -> str:
        _, stdout = self._pipes()
        line = stdout.readline()
        if not line:
            raise JavaUnavailable("the Java assignor harness exited (see its stderr above)")
        return line

    def measure(self, assignor: str, subscription: str, mode: str, members: int, ppm: int,
                topics: int) -> JavaCell:
        stdin, _ = self._pipes()
        stdin.write(f"{assignor} {subscription} {mode} {members} {ppm} {topics}\n")
        stdin.flush()
        got = json.loads(self._readline())
        return JavaCell(best_ms=got["best_ms"], median_ms=got["median_ms"],
                        best_cpu_ms=got["best_cpu_ms"], runs=got["runs"],
                        warmup_runs=got["warmup_runs"], partitions=got["partitions"],
                        assigned=got["assigned"], members_out=got["members_out"])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> JavaAssignors:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

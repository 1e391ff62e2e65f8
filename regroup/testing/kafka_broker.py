"""A real Apache Kafka broker beside regroup, for tests and benchmarks: one single-node KRaft process.

The broker is Apache Kafka's own (``org.apache.kafka:kafka_2.13``, :data:`KAFKA_VERSION`), run from a
classpath of jars that ``scripts/kafka/fetch.sh`` (called by ``scripts/setup.sh``) fetches from Maven
Central into ``.cache/kafka/<version>/lib``; ``REGROUP_KAFKA_LIBS`` points at another directory of jars.
Java 17 or newer runs it (``JAVA_HOME``, else ``java`` on the ``PATH``).

:func:`start_kafka` formats a fresh directory (a random cluster id, one combined broker+controller
node, ``process.roles=broker,controller``, the controller quorum bootstrapped with ``--standalone``),
starts ``kafka.Kafka`` on free loopback ports with a small heap and settings for a 2-core machine, and
returns once the broker answers a metadata request listing itself. :meth:`KafkaBroker.stop` sends
SIGTERM (Kafka shuts down cleanly), kills it if it does not exit in time, and removes its directory::

    with start_kafka() as broker:
        log = KafkaLog(broker.bootstrap)

By hand: ``python -m regroup.testing.kafka_broker [--port 9092]`` starts one, prints its bootstrap
address and runs until Ctrl-C.

Starting cost: two JVMs (the storage format, then the broker). The format always runs with the C1
compiler only, the broker too when ``fast_start`` (the default; benchmarks that want Kafka's peak
speed pass ``fast_start=False``), and both with an application class-data-sharing archive of Kafka's
classes, written next to the jars when the first broker stops and used by every later start.

The broker runs in its own session (a terminal's Ctrl-C reaches only this process, which stops it
cleanly) and, where util-linux's ``setpriv`` exists, with a parent-death signal: if the process that
started it dies (a killed test run), the broker gets SIGTERM instead of living on. Its directory is
left behind then.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from regroup.testing.serving import log_tail, serve_until_signal

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaStartError",
    "KafkaUnavailableError",
    "kafka_lib_dir",
    "start_kafka",
]

#: The Apache Kafka release started (scripts/kafka/pom.xml's ``kafka.version`` must say the same).
KAFKA_VERSION = "4.4.0"
#: A directory of jars to run instead of the fetched one.
LIBS_ENV = "REGROUP_KAFKA_LIBS"

_REPO_ROOT = Path(__file__).resolve().parents[2]

#: The broker's settings besides listeners and directories; ``start_kafka(config=...)`` overrides them.
DEFAULT_CONFIG: Mapping[str, str] = {
    # A 2-core machine: few threads.
    "num.network.threads": "1",
    "num.io.threads": "2",
    "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "2",
    "log.cleaner.threads": "1",
    # One node: every internal topic has one replica.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Kafka's default, stated: regroup's Kafka log must not create topics by asking about them, and
    # that is only tested on a broker that would.
    "auto.create.topics.enable": "true",
    # Group protocols (classic, consumer, share, streams) are left at Kafka 4.x's defaults.
}

_JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Xlog:cds=off",  # the archive's writer lists every class it skips
)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class KafkaUnavailableError(RuntimeError):
    """Kafka's jars or Java are missing: nothing was started."""


class KafkaStartError(RuntimeError):
    """The broker was started but did not come up (the message ends with its log)."""


def kafka_lib_dir() -> Path:
    """Where the broker's jars are: ``$REGROUP_KAFKA_LIBS``, else ``.cache/kafka/<version>/lib``."""
    env = os.environ.get(LIBS_ENV)
    if env:
        return Path(env)
    return _REPO_ROOT / ".cache" / "kafka" / KAFKA_VERSION / "lib"


def _classpath(lib_dir: Path) -> list[Path]:
    jars = sorted(lib_dir.glob("*.jar"))
    if not any(j.name.startswith("kafka_2.13-") for j in jars):
        raise KafkaUnavailableError(
            f"Apache Kafka's jars are not in {lib_dir}; fetch them with `bash scripts/kafka/fetch.sh` "
            f"(scripts/setup.sh does), or point {LIBS_ENV} at a directory of Kafka {KAFKA_VERSION} jars"
        )
    return jars


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailableError("Java (17 or newer) was not found; Kafka's broker needs it")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    """A random Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):  # as Kafka's Uuid.randomUuid: it must not look like an option
            return text


def _cds_archive(java: str, jars: list[Path]) -> tuple[Path | None, Path | None]:
    """The class-data-sharing archive for this Java and these jars: ``(archive, None)`` when it exists,
    ``(archive, temporary path)`` for this start to write it as it exits, ``(None, None)`` if there is
    nowhere to write it. A JVM that cannot use an archive (another Java) ignores it."""
    key = hashlib.sha256()
    real = Path(java).resolve()
    key.update(f"{real}:{real.stat().st_mtime_ns}".encode())
    for jar in jars:
        key.update(f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}".encode())
    archive = jars[0].parent.parent / "cds" / f"kafka-{key.hexdigest()[:16]}.jsa"
    if archive.is_file():
        return archive, None
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None, None
    if not os.access(archive.parent, os.W_OK):
        return None, None
    return archive, archive.with_name(f"{archive.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


@dataclass
class KafkaBroker:
    """A running single-node Kafka broker (started by :func:`start_kafka`)."""

    #: ``127.0.0.1:PORT`` of its PLAINTEXT listener: ``kafka://`` + this is a regroup log spec.
    bootstrap: str
    #: ``127.0.0.1:PORT`` of its controller listener.
    controller: str
    cluster_id: str
    #: The broker's directory: ``server.properties``, ``server.log``, ``data/`` (removed on stop).
    work_dir: Path
    process: subprocess.Popen[bytes]
    #: Seconds from the call of :func:`start_kafka` until the broker answered (format included).
    start_seconds: float
    keep_files: bool = False
    _archive_tmp: Path | None = field(default=None, repr=False)
    _archive: Path | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.work_dir / "server.log"

    @property
    def port(self) -> int:
        return int(self.bootstrap.rpartition(":")[2])

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (Kafka's clean shutdown), SIGKILL after ``timeout_s``; then remove its directory.

        Returns the exit status. Idempotent. The broker that writes the class-data-sharing archive as
        it exits (the first one of a classpath) gets 120 s at least: the dump takes seconds to tens of
        seconds on a busy machine.
        """
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s if self._archive_tmp is None else max(timeout_s, 120.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._archive_tmp is not None and self._archive is not None:
            # The first broker of this classpath dumped the classes it loaded as it exited.
            # (An exit by signal, e.g. SIGKILL, may have cut the dump short.)
            if self._archive_tmp.is_file() and proc.returncode >= 0:
                with contextlib.suppress(OSError):
                    os.replace(self._archive_tmp, self._archive)
            with contextlib.suppress(OSError):
                self._archive_tmp.unlink()
            self._archive_tmp = None
        if not self.keep_files:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return proc.returncode

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _run_format(
    java: str, jvm: list[str], cp: str, work_dir: Path, properties: Path, cluster_id: str, deadline: float
) -> None:
    out = work_dir / "format.log"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", *jvm, "-cp", cp, "kafka.tools.StorageTool",
             "format", "--config", str(properties), f"--cluster-id={cluster_id}", "--standalone"],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise KafkaStartError(f"formatting the broker's storage took too long:\n{log_tail(out)}") from None
    if code != 0:
        raise KafkaStartError(f"formatting the broker's storage failed (exit {code}):\n{log_tail(out)}")


def _wait_until_serving(proc: subprocess.Popen[bytes], port: int, deadline: float, log: Path) -> None:
    """Until the broker answers a metadata request that lists itself (registered and unfenced)."""
    from confluent_kafka.admin import AdminClient  # a heavy import, and only needed here

    def exited() -> KafkaStartError:
        return KafkaStartError(f"the Kafka broker exited with {proc.returncode} while starting:\n"
                               f"{log_tail(log)}")

    # First the listener, so that the client below does not back off from refused connections.
    while True:
        if proc.poll() is not None:
            raise exited()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"the Kafka broker did not listen on port {port} in time:\n{log_tail(log)}"
                ) from None
            time.sleep(0.05)
    admin = AdminClient({
        "bootstrap.servers": f"127.0.0.1:{port}",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 200,
        "allow.auto.create.topics": False,
    })
    while True:
        if proc.poll() is not None:
            raise exited()
        left = deadline - time.monotonic()
        if left <= 0:
            raise KafkaStartError(
                f"the Kafka broker did not answer a metadata request in time:\n{log_tail(log)}"
            )
        try:
            if admin.list_topics(timeout=min(1.0, left)).brokers:
                return
        except Exception:  # not answering yet (KafkaException: timed out, transport)
            pass


def start_kafka(
    *,
    port: int = 0,
    heap_mb: int = 512,
    config: Mapping[str, str] | None = None,
    parent_dir: str | Path | None = None,
    timeout_s: float = 120.0,
    fast_start: bool = True,
    keep_files: bool = False,
    log_level: str = "INFO",
) -> KafkaBroker:
    """Start a single-node KRaft broker (broker and controller in one process) and wait until it serves.

    ``port`` 0 picks a free one (and retries with another if it was taken meanwhile); the controller
    listener always takes a free port. ``config`` adds or overrides broker settings
    (:data:`DEFAULT_CONFIG`). The broker's directory is created under ``parent_dir`` (the system's
    temporary directory by default) and removed by :meth:`KafkaBroker.stop` unless ``keep_files``.
    Raises :class:`KafkaUnavailableError` when the jars or Java are missing, :class:`KafkaStartError`
    when the broker does not serve within ``timeout_s``.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    jars = _classpath(kafka_lib_dir())
    java = _java()
    cp = os.pathsep.join(str(j) for j in jars)
    attempts = 3 if port == 0 else 1
    for attempt in range(attempts):
        try:
            return _start_once(java, jars, cp, port or _free_port(), heap_mb, config, parent_dir,
                               deadline, t0, fast_start, keep_files, log_level)
        except _PortTaken:
            if attempt == attempts - 1:
                raise KafkaStartError(
                    f"no free port for the Kafka broker after {attempts} attempts"
                ) from None
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _start_once(
    java: str,
    jars: list[Path],
    cp: str,
    port: int,
    heap_mb: int,
    config: Mapping[str, str] | None,
    parent_dir: str | Path | None,
    deadline: float,
    t0: float,
    fast_start: bool,
    keep_files: bool,
    log_level: str,
) -> KafkaBroker:
    controller_port = _free_port()
    while controller_port == port:
        controller_port = _free_port()
    work_dir = Path(tempfile.mkdtemp(prefix="regroup-kafka-", dir=parent_dir))
    cluster_id = _cluster_id()
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(work_dir / "data"),
        **DEFAULT_CONFIG,
        **(config or {}),
    }
    properties = work_dir / "server.properties"
    properties.write_text(_properties(settings))
    log4j = work_dir / "log4j2.properties"
    log4j.write_text(_LOG4J2.format(level=log_level))
    jvm = [f"-Dlog4j2.configurationFile={log4j}", *_JVM_OPTIONS]
    archive, archive_tmp = _cds_archive(java, jars)
    if archive is not None and archive_tmp is None:
        jvm.append(f"-XX:SharedArchiveFile={archive}")
    try:
        _run_format(java, jvm, cp, work_dir, properties, cluster_id, deadline)
    except BaseException:
        if not keep_files:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    server_jvm = [f"-Xmx{heap_mb}m", f"-Xms{min(heap_mb, 256)}m", *jvm]
    if fast_start:
        server_jvm.append("-XX:TieredStopAtLevel=1")
    if archive_tmp is not None:
        server_jvm.append(f"-XX:ArchiveClassesAtExit={archive_tmp}")
    # The broker dies with this process (setpriv's parent-death signal) instead of outliving a killed
    # test run; its own session keeps a terminal's Ctrl-C for this process, which stops it cleanly.
    prefix = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []
    log_path = work_dir / "server.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [*prefix, java, *server_jvm, "-cp", cp, "kafka.Kafka", str(properties)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    broker = KafkaBroker(
        bootstrap=f"127.0.0.1:{port}",
        controller=f"127.0.0.1:{controller_port}",
        cluster_id=cluster_id,
        work_dir=work_dir,
        process=proc,
        start_seconds=0.0,
        keep_files=keep_files,
        _archive_tmp=archive_tmp,
        _archive=archive,
    )
    try:
        _wait_until_serving(proc, port, deadline, log_path)
    except KafkaStartError as e:
        taken = "Address already in use" in log_tail(log_path, 400)
        broker.keep_files = True  # the message quotes the log; the directory goes below unless asked
        broker.stop(timeout_s=5.0)
        if not keep_files:
            shutil.rmtree(work_dir, ignore_errors=True)
        if taken:
            raise _PortTaken() from e
        raise
    except BaseException:
        broker.stop(timeout_s=5.0)
        raise
    broker.start_seconds = time.monotonic() - t0
    return broker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m regroup.testing.kafka_broker",
        description=f"Start a single-node Apache Kafka {KAFKA_VERSION} broker (KRaft) on loopback and run "
                    "it until Ctrl-C; its files are removed when it stops.",
    )
    parser.add_argument("--port", type=int, default=0,
                        help="the PLAINTEXT listener's port (default: a free one)")
    parser.add_argument("--heap-mb", type=int, default=512, help="the broker's -Xmx (default 512)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable), e.g. --set num.partitions=6")
    parser.add_argument("--full-jit", action="store_true",
                        help="C2 as well as C1 (slower start, Kafka's peak speed; for benchmarks)")
    parser.add_argument("--keep", action="store_true", help="keep the broker's directory (config, log, data)")
    args = parser.parse_args(argv)
    config = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        config[key.strip()] = value.strip()
    try:
        broker = start_kafka(port=args.port, heap_mb=args.heap_mb, config=config,
                             fast_start=not args.full_jit, keep_files=args.keep)
    except (KafkaUnavailableError, KafkaStartError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"Apache Kafka {KAFKA_VERSION} serving on {broker.bootstrap} "
          f"(log spec kafka://{broker.bootstrap}); started in {broker.start_seconds:.1f} s; "
          f"log {broker.log_path}; Ctrl-C stops it", flush=True)
    return serve_until_signal(broker.process, broker.stop, args.keep, broker.work_dir)


if __name__ == "__main__":
    sys.exit(main())

"""A state root on any Hadoop filesystem (``hdfs://``, ``s3a://``, …): `StatePath` through Hadoop's
FileSystem API in the driver's JVM, over py4j.

The filesystem is the one Spark itself keeps the queries' checkpoints on — the same URI, the same
Hadoop configuration (``spark._jsc.hadoopConfiguration()``, i.e. the session's ``spark.hadoop.*``
settings), the same cached `FileSystem` instance — so the copies made here and the checkpoints Spark
writes are the same files, seen the same way. Every call is a JVM round trip (a fraction of a
millisecond) plus the filesystem's own (an HDFS NameNode RPC, an object store request), so the
copy lists a directory tree once (``listFiles``, recursive) and copies file by file with
``FileUtil.copy``.

What is atomic: `rename_to` is HDFS's rename, one NameNode operation, so a copy appears complete or
not at all, as in a local directory. On object stores (S3A, GCS, ABFS without a hierarchical
namespace) a directory rename is a copy of each object and a delete: not atomic, and it costs
about a second copy. That is safe here — a checkpoint directory only becomes a task's state of
record through a commit from a query that ran on it, never through its name, so an interrupted
copy is only garbage (pruned later) — but slower.

Java exceptions become Python's: a missing file (`java.io.FileNotFoundException`, or a block that
vanished under a read) is `FileNotFoundError`, so the copy's retry works as on a local disk; any
other is `OSError` naming the path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

from regroup.spark.tasks.statepath import StatePath, StateRootError

__all__ = ["HadoopPath", "open_hadoop_root"]

T = TypeVar("T")

#: Java exceptions that mean "the file is not there (any more)": Spark removed it between our
#: listing and our read, or the root is not there.
_MISSING = frozenset({"java.io.FileNotFoundException", "org.apache.hadoop.hdfs.BlockMissingException"})


class _Hadoop:
    """One filesystem of the driver's JVM: the instance and the classes every path shares (looked
    up once: each step of a py4j package path such as ``jvm.org.apache…`` is a JVM round trip)."""

    def __init__(self, jvm: Any, conf: Any, fs: Any) -> None:
        self.conf, self.fs = conf, fs
        self.path_class = jvm.org.apache.hadoop.fs.Path
        self.file_util = jvm.org.apache.hadoop.fs.FileUtil

    def path(self, uri: str) -> Any:
        return self.path_class(uri)


def _java_classes(error: Py4JJavaError) -> set[str]:
    names: set[str] = set()
    cls = error.java_exception.getClass()
    while cls is not None:
        names.add(str(cls.getName()))
        cls = cls.getSuperclass()
    return names


def _java_message(error: Py4JJavaError) -> str:
    """``java.io.IOException: what happened``, without the stack trace py4j adds."""
    return str(error.java_exception.toString())


@contextmanager
def _os_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Py4JJavaError as e:
        if _java_classes(e) & _MISSING:
            raise FileNotFoundError(f"{what}: {_java_message(e)}") from None
        raise OSError(f"{what}: {_java_message(e)}") from None


@dataclass(frozen=True)
class HadoopPath:
    """A `StatePath` on a Hadoop filesystem; ``uri`` is fully qualified (scheme and authority)."""

    hadoop: _Hadoop = field(repr=False, compare=False)
    uri: str

    def __str__(self) -> str:
        return self.uri

    def _call(self, fn: Callable[[Any], T]) -> T:
        with _os_errors(self.uri):
            return fn(self.hadoop.path(self.uri))

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rpartition("/")[2]

    def __truediv__(self, part: str) -> HadoopPath:
        return HadoopPath(self.hadoop, f"{self.uri.rstrip('/')}/{part.strip('/')}")

    def with_name(self, name: str) -> HadoopPath:
        return HadoopPath(self.hadoop, f"{self.uri.rstrip('/').rpartition('/')[0]}/{name}")

    def exists(self) -> bool:
        return bool(self._call(self.hadoop.fs.exists))

    def is_dir(self) -> bool:
        try:
            return bool(self._call(lambda p: self.hadoop.fs.getFileStatus(p).isDirectory()))
        except FileNotFoundError:
            return False

    def iterdir(self) -> list[StatePath]:
        statuses = self._call(self.hadoop.fs.listStatus)
        return [self / str(s.getPath().getName()) for s in statuses]

    def files(self) -> list[tuple[str, StatePath]]:
        def walk(p: Any) -> list[tuple[str, StatePath]]:
            fs = self.hadoop.fs
            base = str(fs.makeQualified(p).toUri().getPath()).rstrip("/") + "/"
            found = fs.listFiles(p, True)  # one recursive listing (HDFS: batched NameNode calls)
            out: list[tuple[str, StatePath]] = []
            while found.hasNext():
                full = str(found.next().getPath().toUri().getPath())
                if not full.startswith(base):
                    raise OSError(f"{self.uri}: listing returned {full}, not below it")
                rel = full[len(base):]
                out.append((rel, self / rel))
            return out

        try:
            return sorted(self._call(walk), key=lambda f: f[0])
        except FileNotFoundError:
            return []

    def read_text(self) -> str:
        def read(p: Any) -> bytes:
            stream = self.hadoop.fs.open(p)
            try:
                return bytes(stream.readAllBytes())
            finally:
                stream.close()

        return self._call(read).decode()

    def write_text(self, text: str) -> None:
        def write(p: Any) -> None:
            out = self.hadoop.fs.create(p, True)  # makes the parent directories
            try:
                out.write(bytearray(text.encode()))
            finally:
                out.close()

        self._call(write)

    def mkdir(self) -> None:
        if not self._call(self.hadoop.fs.mkdirs):
            raise OSError(f"{self.uri}: the filesystem refused to make the directory")

    def copy_to(self, target: StatePath) -> None:
        assert isinstance(target, HadoopPath), target
        h = self.hadoop
        # deleteSource False, overwrite True (a fresh temporary directory: nothing to keep).
        copied = self._call(lambda p: h.file_util.copy(h.fs, p, h.fs, h.path(target.uri), False, True,
                                                       h.conf))
        if not copied:
            raise OSError(f"cannot copy {self.uri} to {target.uri}")

    def rename_to(self, target: StatePath) -> None:
        assert isinstance(target, HadoopPath), target
        if not self._call(lambda p: self.hadoop.fs.rename(p, self.hadoop.path(target.uri))):
            raise OSError(f"cannot rename {self.uri} to {target.uri} (does the target exist?)")

    def remove(self) -> None:
        self._call(lambda p: self.hadoop.fs.delete(p, True))


def open_hadoop_root(spark: Any, location: str) -> HadoopPath:
    """The directory ``location`` on its Hadoop filesystem, made if missing; `StateRootError`
    naming it when no filesystem serves its scheme, it cannot be reached, or not written."""
    try:
        jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    except AttributeError:
        raise StateRootError(f"state root {location}: a state root that is not a local directory is "
                             "reached through the driver's JVM; this session has none "
                             "(Spark Connect?)") from None
    try:
        path = jvm.org.apache.hadoop.fs.Path(location)
        fs = path.getFileSystem(conf)
        uri = str(fs.makeQualified(path).toString())
    except Py4JJavaError as e:
        raise StateRootError(f"state root {location}: {_java_message(e)}{_hint(jvm, e)}") from None
    root = HadoopPath(_Hadoop(jvm, conf, fs), uri)
    try:
        root.mkdir()
        if not root.is_dir():
            raise OSError("it is not a directory")
    except OSError as e:
        raise StateRootError(f"state root {location}: cannot make or reach the directory: {e}") from None
    return root


def _hint(jvm: Any, error: Py4JJavaError) -> str:
    """What to do when no filesystem serves the scheme: Hadoop's configuration may name a class
    that is not on the classpath (``s3a`` without hadoop-aws), or nothing at all."""
    message = _java_message(error)
    if "No FileSystem for scheme" not in message and "ClassNotFoundException" not in message:
        return ""
    version = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    return (f" — the filesystem's connector is not on Spark's classpath (for s3a:// add "
            f"org.apache.hadoop:hadoop-aws:{version} to spark.jars.packages; see docs/spark.md)")

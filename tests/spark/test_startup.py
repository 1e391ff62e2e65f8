"""The source's process environment: the fast-start ``sitecustomize`` and the finished-batch channel.

The pure parts run without Spark; the last tests check, with real Spark, that a query's reader
process gets the environment and that ``register`` leaves the session's own environment alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from regroup.spark import finished
from regroup.spark._boot.sitecustomize import installed_first
from regroup.spark.startup import BOOT_DIR
from tests.spark.conftest import Cluster, wait_until


def fake_pip_pyspark(site: Path, version: str = "4.3.0", zip_version: str = "4.3.0") -> Path:
    """A site-packages dir with a pip-installed pyspark (SPARK_HOME = site/pyspark) and its zips."""
    home = site / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "__init__.py").write_text("")
    (home / "version.py").write_text(f"__version__ = {version!r}\n")
    with zipfile.ZipFile(home / "python" / "lib" / "pyspark.zip", "w") as z:
        z.writestr("pyspark/version.py", f"__version__ = {zip_version!r}\n")
    (site / "py4j").mkdir()
    (site / "py4j" / "version.py").write_text("__version__ = '0.10.9.9'\n")
    with zipfile.ZipFile(home / "python" / "lib" / "py4j-0.10.9.9-src.zip", "w") as z:
        z.writestr("py4j/version.py", "__version__ = '0.10.9.9'\n")
    return home / "python" / "lib"


def test_the_installed_pyspark_serves_imports_only_when_it_is_the_zips_release(tmp_path: Path) -> None:
    lib = fake_pip_pyspark(tmp_path / "site")
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), BOOT_DIR, "/usr/lib/python3.11"]
    finder = installed_first(path)
    assert finder is not None
    assert finder.site_dir == str(tmp_path / "site") and finder.names == {"pyspark", "py4j"}
    assert finder.find_spec("pyspark") is not None and finder.find_spec("pyspark.sql") is None
    assert finder.find_spec("numpy") is None

    other = fake_pip_pyspark(tmp_path / "mismatch", zip_version="4.2.0")
    assert installed_first([str(other / "pyspark.zip")]) is None
    # A standalone Spark distribution: SPARK_HOME is not the installed package.
    standalone = tmp_path / "opt" / "spark" / "python" / "lib"
    standalone.mkdir(parents=True)
    with zipfile.ZipFile(standalone / "pyspark.zip", "w") as z:
        z.writestr("pyspark/version.py", "__version__ = '4.3.0'\n")
    assert installed_first([str(standalone / "pyspark.zip")]) is None
    assert installed_first(["/usr/lib/python3.11"]) is None


def test_a_worker_started_like_sparks_imports_the_compiled_pyspark() -> None:
    """The JVM's PYTHONPATH (Spark's zips first), plus the source's: pyspark comes from the installed
    package; without the source's part, from the zip."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*-src.zip"))]
    code = "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"

    def where(pythonpath: list[str]) -> list[str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True)
        return out.stdout.split()

    assert all(".zip" not in f for f in where([*zips, BOOT_DIR])), "imported from the zip"
    assert all(".zip" in f for f in where(zips)), "this pyspark is not pip-installed with its zip"


def test_wait_finished_commits_only_the_batch_the_listener_reported(tmp_path: Path) -> None:
    token = "0123456789abcdef"
    e1 = {"v": 1, "epoch": 3, "ends": {"orders:0": 10}, "reader": token}
    e2 = {"v": 1, "epoch": 3, "ends": {"orders:0": 20}, "reader": token}
    assert finished.record_finished(tmp_path, json.dumps(e1)) == token
    assert finished.record_finished(tmp_path, json.dumps({"v": 1, "ends": {}})) is None
    assert finished.record_finished(tmp_path, "not json, reader") is None
    assert finished.wait_finished(tmp_path, e1, timeout=0)
    assert not (tmp_path / f"{token}.json").exists(), "the reader removes its file once decided"
    # The batch ending at e2 is still running when the query run ends: never claimed.
    finished.record_finished(tmp_path, json.dumps(e1))
    finished.record_terminated(tmp_path, token)
    assert not finished.wait_finished(tmp_path, e2, timeout=30)
    # No word from the listener: the wait ends at its timeout; an offset without a token: at once.
    assert not finished.wait_finished(tmp_path, e2, timeout=0.05)
    assert not finished.wait_finished(tmp_path, {"v": 1, "ends": {}}, timeout=30)


def test_wait_finished_waits_for_the_listeners_word(tmp_path: Path) -> None:
    token = "fedcba9876543210"
    end = {"v": 1, "epoch": 1, "ends": {"orders:1": 7}, "reader": token}
    # The listener's word comes while the reader waits (the test passes however the two interleave).
    writer = threading.Timer(0.2, finished.record_finished, (tmp_path, json.dumps(end)))
    writer.start()
    try:
        assert finished.wait_finished(tmp_path, end, timeout=30)
    finally:
        writer.join()


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_the_readers_process_gets_the_sources_environment(cluster: Cluster, spark: Any) -> None:
    before = dict(spark.sparkContext.environment)
    from regroup.spark import register

    register(spark)  # again: idempotent, one listener per session
    assert dict(spark.sparkContext.environment) == before, "register changed the session's environment"
    c = cluster
    c.produce(60)
    c.start("a")
    owners = c.wait_stable(1)
    environ = Path(f"/proc/{c.reader_pid(next(iter(owners)))}/environ").read_text()
    env = dict(line.split("=", 1) for line in environ.split("\0") if "=" in line)
    assert BOOT_DIR in env["PYTHONPATH"].split(os.pathsep)
    assert Path(env[finished.ENV]).is_dir()
    wait_until(lambda: len(c.wait_processed(timeout=0)) == 60, 60, "the records to be read")

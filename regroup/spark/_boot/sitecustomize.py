"""Run by Python's ``site`` at start-up in the regroup source's Spark Python processes only.

`regroup.spark.register` puts this directory on the PYTHONPATH of the source's processes (Spark's
per-function environment). The JVM puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip)
first on every Python worker's path, and a zip holds no bytecode: each new process compiles what it
imports of pyspark (≈0.4 s of CPU). With a pip-installed pyspark, ``SPARK_HOME`` *is* the installed
package directory, so the same release sits next to the zip, compiled. When the version files match,
the top-level ``pyspark`` and ``py4j`` imports are served from the installed packages (their
submodules follow the package's ``__path__``); nothing else on ``sys.path`` moves. Anything else — a
standalone Spark distribution, a version mismatch, an error — leaves the process as it was.

Another ``sitecustomize`` later on the path (this one shadows it) is run afterwards.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any

_ZIP_TAIL = os.path.join("python", "lib", "pyspark.zip")


class InstalledFirst:
    """A meta path finder: these top-level packages from the directory ``site_dir``."""

    def __init__(self, site_dir: str, names: frozenset[str]) -> None:
        self.site_dir, self.names = site_dir, names

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        return PathFinder.find_spec(fullname, [self.site_dir])


def _same_file(zip_path: str, inner: str, installed: str) -> bool:
    import zipimport

    try:
        with open(installed, "rb") as f:
            return bool(zipimport.zipimporter(zip_path).get_data(inner) == f.read())
    except (OSError, zipimport.ZipImportError):
        return False


def installed_first(path: list[str]) -> InstalledFirst | None:
    """The finder for a ``path`` that has a pip-installed pyspark's own zip on it, else None."""
    zip_path = next((p for p in path if p.endswith(os.sep + _ZIP_TAIL)), None)
    if zip_path is None:
        return None
    spark_home = zip_path[: -len(os.sep + _ZIP_TAIL)]
    site_dir = os.path.dirname(spark_home)
    if os.path.basename(spark_home) != "pyspark" or not _same_file(
            zip_path, "pyspark/version.py", os.path.join(spark_home, "version.py")):
        return None
    names = {"pyspark"}
    lib = os.path.dirname(zip_path)
    py4j_zip = next((p for p in path if os.path.dirname(p) == lib and os.path.basename(p).startswith("py4j")),
                    None)
    installed_py4j = os.path.join(site_dir, "py4j", "version.py")
    if py4j_zip is not None and _same_file(py4j_zip, "py4j/version.py", installed_py4j):
        names.add("py4j")
    return InstalledFirst(site_dir, frozenset(names))


def _run_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        from importlib.util import module_from_spec

        spec.loader.exec_module(module_from_spec(spec))


def _install() -> None:
    if "pyspark" in sys.modules or any(isinstance(f, InstalledFirst) for f in sys.meta_path):
        return
    finder = installed_first(sys.path)
    if finder is not None:
        sys.meta_path.insert(0, finder)


if __name__ == "sitecustomize":
    try:  # noqa: SIM105 - contextlib is one more import in every worker
        _install()
    except Exception:  # never stop a Spark worker from starting: it then imports the zip
        pass
    _run_next_sitecustomize()

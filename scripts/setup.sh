#!/usr/bin/env bash
# Set up everything regroup needs in ./.venv (idempotent): a virtual environment with the pinned
# dependencies and regroup itself installed in editable mode.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "regroup needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
# Java 17 for PySpark (the Spark source and demo): install it with apt when missing and we are root.
if ! java -version 2>&1 | grep -qE 'version "(17|2[0-9])'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing OpenJDK 17 (for PySpark) with apt-get..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "note: Java 17 was not found; PySpark needs it. Install it (e.g. sudo apt-get install" \
         "openjdk-17-jre-headless); everything else works without it." >&2
  fi
fi
# Chromium for the dashboard's browser tests (Playwright drives the system one; its own download does
# not work offline): install Debian's package when missing and we are root.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Chromium (for the dashboard's browser tests) with apt-get..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: Chromium was not found; the dashboard's browser tests need it (e.g. sudo apt-get" \
         "install chromium, or set REGROUP_SKIP_BROWSER=1 to skip them)." >&2
  fi
fi
# A C compiler and Python's headers for the uniform assignor's C pass (regroup/protocol/assignors/
# _uniform_scan.c, built by the install below): install them with apt when missing and we are root.
# Without them the install still works and the assignor uses its Python twin (slower).
if ! command -v cc >/dev/null || ! "$PYTHON" -c 'import os, sysconfig, sys
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing a C compiler and Python's headers (for the uniform assignor's C pass) with apt-get..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev >/dev/null
  else
    echo "note: a C compiler or Python's headers were not found; the uniform assignor will use its" \
         "slower Python path (e.g. sudo apt-get install gcc python3-dev)." >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet -e '.[dev]'
# Apache Kafka's broker for the Kafka log tests: jars from Maven Central, cached in .cache/kafka
# (returns at once when already fetched). Everything else works without it.
bash scripts/kafka/fetch.sh || echo "note: Apache Kafka could not be fetched; the Kafka tests will fail" \
  "(REGROUP_SKIP_KAFKA=1 skips them). Run bash scripts/kafka/fetch.sh to retry." >&2
# A single-node HDFS (Hadoop's MiniDFSCluster) for the task-mode state-root tests: jars from Maven
# Central, cached in .cache/hdfs (returns at once when already fetched). Everything else works without it.
bash scripts/hdfs/fetch.sh || echo "note: Hadoop's MiniDFSCluster could not be fetched; the HDFS tests will" \
  "fail (REGROUP_SKIP_HDFS=1 skips them). Run bash scripts/hdfs/fetch.sh to retry." >&2

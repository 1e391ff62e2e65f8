#!/usr/bin/env bash
# Fetch the single-node HDFS the task-mode tests keep state on (scripts/hdfs/pom.xml: Hadoop's
# hadoop-client-minicluster, the shaded client it runs on, an SLF4J binding) from Maven Central into
# .cache/hdfs/<version>/lib, and compile its launcher (scripts/hdfs/MiniHdfs.java) into
# .cache/hdfs/<version>/classes; regroup/testing/hdfs.py runs it with `java -cp`. Idempotent: when
# both were made from the same pom.xml and MiniHdfs.java it returns at once, without starting Maven
# (a changed MiniHdfs.java is only compiled again).
# Called by scripts/setup.sh.
#
# Needs Maven (installed with apt when missing and we are root) and a JDK (javac); Maven keeps its
# downloads in its local repository (~/.m2 unless MAVEN_OPTS/-Dmaven.repo.local says otherwise).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/scripts/hdfs"
POM="$HERE/pom.xml"
SRC="$HERE/MiniHdfs.java"
VERSION=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$POM")
DEST="${REGROUP_HDFS_CACHE:-$ROOT/.cache/hdfs}/$VERSION"
LIB="$DEST/lib"
CLASSES="$DEST/classes"
STAMP="$DEST/fetched-from"
WANT_LIB="$(sha256sum "$POM" | cut -d' ' -f1)"
WANT_CLASSES="$(sha256sum "$SRC" | cut -d' ' -f1)"

jars_fresh() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_LIB" ] && [ -f "$LIB/hadoop-client-minicluster-$VERSION.jar" ]
}
launcher_fresh() { [ -f "$CLASSES/compiled-from" ] && [ "$(cat "$CLASSES/compiled-from")" = "$WANT_CLASSES" ]; }
jars_fresh && launcher_fresh && exit 0

if ! jars_fresh && ! command -v mvn >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Maven (to fetch the HDFS the tests run) with apt-get..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
  else
    echo "note: Maven was not found; the HDFS tests need it to fetch Hadoop $VERSION's MiniDFSCluster" \
         "(e.g. sudo apt-get install maven, then bash scripts/hdfs/fetch.sh)." >&2
    exit 0
  fi
fi
JAVAC="${JAVA_HOME:+$JAVA_HOME/bin/}javac"
if ! command -v "$JAVAC" >/dev/null; then
  echo "note: javac was not found; the HDFS tests need a JDK to compile their launcher" \
       "(e.g. sudo apt-get install openjdk-17-jdk-headless, then bash scripts/hdfs/fetch.sh)." >&2
  exit 0
fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9                      # two set-ups at once: the second waits, then finds it fetched
if ! jars_fresh; then
  echo "fetching Hadoop $VERSION's MiniDFSCluster (about 105 MB of jars) from Maven Central into $LIB..."
  TMP="$(mktemp -d "$DEST/lib.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  if ! mvn -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$TMP" >"$DEST/mvn.log" 2>&1 || [ ! -f "$TMP/hadoop-client-minicluster-$VERSION.jar" ]; then
    tail -n 40 "$DEST/mvn.log" >&2
    echo "fetching Hadoop $VERSION failed; Maven's output is in $DEST/mvn.log" >&2
    exit 1
  fi
  rm -rf "$LIB" "$CLASSES"   # the launcher is compiled against these jars
  mv "$TMP" "$LIB"
  echo "$WANT_LIB" >"$STAMP"
fi
if ! launcher_fresh; then
  # Compiled against the jars only (the cluster's classes are in the minicluster jar): one class.
  TMP="$(mktemp -d "$DEST/classes.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  if ! "$JAVAC" -nowarn -d "$TMP" -cp "$LIB/*" "$SRC" >"$DEST/javac.log" 2>&1; then
    cat "$DEST/javac.log" >&2
    echo "compiling scripts/hdfs/MiniHdfs.java failed" >&2
    exit 1
  fi
  echo "$WANT_CLASSES" >"$TMP/compiled-from"
  rm -rf "$CLASSES"
  mv "$TMP" "$CLASSES"
fi

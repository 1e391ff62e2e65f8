#!/usr/bin/env bash
# Fetch the Apache Kafka broker the tests start (scripts/kafka/pom.xml: kafka_2.13 and the log4j binding
# it logs through) from Maven Central into .cache/kafka/<version>/lib, a classpath of jars that
# regroup/testing/kafka_broker.py runs with `java -cp`. Idempotent: when that directory was filled
# from the same pom.xml it returns at once, without starting Maven. Called by scripts/setup.sh.
#
# Needs Maven (installed with apt when missing and we are root) and Java; Maven keeps its downloads
# in its local repository (~/.m2 unless MAVEN_OPTS/-Dmaven.repo.local says otherwise).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
POM="$ROOT/scripts/kafka/pom.xml"
VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")
DEST="${REGROUP_KAFKA_CACHE:-$ROOT/.cache/kafka}/$VERSION"
LIB="$DEST/lib"
STAMP="$DEST/fetched-from"
WANT="$(sha256sum "$POM" | cut -d' ' -f1)"

fresh() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -f "$LIB/kafka_2.13-$VERSION.jar" ]; }
fresh && exit 0

if ! command -v mvn >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Maven (to fetch the Kafka broker the tests run) with apt-get..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
  else
    echo "note: Maven was not found; the Kafka log tests need it to fetch Apache Kafka $VERSION" \
         "(e.g. sudo apt-get install maven, then bash scripts/kafka/fetch.sh)." >&2
    exit 0
  fi
fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9                      # two set-ups at once: the second waits, then finds it fetched
fresh && exit 0
echo "fetching Apache Kafka $VERSION (broker jars) from Maven Central into $LIB..."
TMP="$(mktemp -d "$DEST/lib.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
if ! mvn -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$TMP" >"$DEST/mvn.log" 2>&1 || [ ! -f "$TMP/kafka_2.13-$VERSION.jar" ]; then
  tail -n 40 "$DEST/mvn.log" >&2
  echo "fetching Apache Kafka $VERSION failed; Maven's output is in $DEST/mvn.log" >&2
  exit 1
fi
rm -rf "$LIB" "$DEST/cds"     # the class-data-sharing archive was made from the old jars
mv "$TMP" "$LIB"
echo "$WANT" >"$STAMP"

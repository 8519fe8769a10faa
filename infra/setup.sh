#!/usr/bin/env bash
# Lakeline set-up: idempotent, fast when everything is already in place.
#   1. checks python3 (3.11/3.12), java 17+, mvn — installs Java/Maven from Debian's packages if missing and root
#   2. creates .venv/ and installs the locked Python dependencies (infra/requirements.lock) + this repo (editable),
#      pyspark from a wheel built once per version into the wheelhouse (LAKELINE_WHEELHOUSE)
#   3. resolves the pinned JVM jars (infra/maven/*/pom.xml) into .lakeline/jars/ and builds and tests Lakeline's JVM
#      module (jvm/) into .lakeline/jars/spark/lakeline-spark-runtime.jar
#   4. packs the Python packages cluster executors need (.lakeline/executor-env/) and makes the JVM class archive
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${LAKELINE_PYTHON:-python3}
UV_VERSION=0.13.9
# pyspark is published as an sdist only: every new venv would build (and uv cache) its 1.4 GB wheel again.
WHEELHOUSE=${LAKELINE_WHEELHOUSE:-$HOME/.cache/lakeline/wheels}

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

command -v "$PY" >/dev/null || die "$PY not found: install Python 3.11 or 3.12 (or set LAKELINE_PYTHON)."
"$PY" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)' \
  || die "$PY is $("$PY" -V 2>&1); Lakeline needs Python 3.11 or 3.12 (set LAKELINE_PYTHON)."

need_apt=()
if ! command -v java >/dev/null || ! java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
  need_apt+=(openjdk-17-jdk-headless)
fi
command -v mvn >/dev/null || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need_apt[*]}: install Java 17+ and Maven, then re-run."
  log "installing ${need_apt[*]} from Debian's packages"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

STAMP=.venv/.lakeline-lock
LOCK_HASH=$(cat infra/requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$LOCK_HASH" ]; then
  log "venv: up to date (.venv)"
else
  [ -x .venv/bin/python ] || { log "venv: creating .venv"; "$PY" -m venv .venv; }
  .venv/bin/python -m pip install -q "uv==$UV_VERSION"
  PYSPARK_VERSION=$(sed -n 's/^pyspark==\([^ ;]*\).*/\1/p' infra/requirements.lock)
  if ! compgen -G "$WHEELHOUSE/pyspark-$PYSPARK_VERSION-*.whl" >/dev/null; then
    log "wheelhouse: building pyspark $PYSPARK_VERSION's wheel once, into $WHEELHOUSE (a few minutes)"
    mkdir -p "$WHEELHOUSE"
    building=$(mktemp -d "$WHEELHOUSE/.building.XXXXXX")
    .venv/bin/python -m pip wheel -q --no-deps --no-cache-dir "pyspark==$PYSPARK_VERSION" -w "$building"
    mv "$building"/pyspark-*.whl "$WHEELHOUSE"/ && rmdir "$building"  # whole wheels only, if interrupted
  fi
  log "venv: installing locked dependencies (first run takes a few minutes)"
  # --compile-bytecode: the whole site-packages as .pyc once here. Where PYTHONDONTWRITEBYTECODE is set, Python
  # never writes them itself and every process compiles pyspark, pandas and pyarrow again: most of a cold
  # `lakeline query`, and of every `lakeline` process a test or a DAG task starts.
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python --find-links "$WHEELHOUSE" \
    -r infra/requirements.lock
  .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
  echo "$LOCK_HASH" > "$STAMP"
  log "venv: ready"
fi

# Lakeline's own modules as .pyc too (a few seconds; a module edited later is compiled afresh, by its time stamp).
.venv/bin/python -m compileall -q ingest lakeline maintenance dags infra bench >/dev/null

.venv/bin/python infra/resolve_jars.py --python .venv/bin/python

# The Python packages Spark executors run Lakeline's code with on a cluster (spark.archives): about 100 MB, packed
# once per lock in a few seconds.
.venv/bin/python -m infra.executor_env

# The JVM class archive local Spark drivers start from (about 5 s off each start): made once per JDK and set of
# jars by running the demo on a temporary stack of its own (about a minute). Without it Spark starts as before.
if [ "${LAKELINE_CLASS_ARCHIVE:-}" = off ]; then
  log "class archive: off (LAKELINE_CLASS_ARCHIVE=off)"
else
  .venv/bin/python -m lakeline dev class-archive 2>&1 | sed 's/^/[setup] /' \
    || log "class archive: not made (Spark drivers start without it); see the lines above"
fi

#!/usr/bin/env bash
# Opt-in set-up of the Flink benchmark peer (bench/peers/flink_iceberg.py). Nothing else in Lakeline needs it.
#   1. its own venv, .lakeline/flink-venv, with PyFlink from infra/requirements-flink.lock (about 700 MB: the
#      apache-flink wheel bundles Flink itself, and pulls Beam, pandas and pyarrow)
#   2. its connector jars from Maven Central (infra/maven/flink/pom.xml: Kafka source, Iceberg Flink runtime and
#      AWS bundle, shaded Hadoop client, SQLite JDBC) into .lakeline/jars/flink (about 170 MB)
# Runs infra/setup.sh first (the stack, uv and the jar resolver come from there). Idempotent, fast when in place.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.lakeline/flink-venv
LOCK=infra/requirements-flink.lock
log() { printf '[flink] %s\n' "$*"; }

bash infra/setup.sh
stamp=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.lakeline-lock" 2>/dev/null)" = "$stamp" ]; then
  log "venv: up to date ($VENV)"
else
  [ -x "$VENV/bin/python" ] || { log "venv: creating $VENV"; .venv/bin/uv venv -q --python "${LAKELINE_PYTHON:-python3}" "$VENV"; }
  log "venv: installing PyFlink from $LOCK (about 700 MB the first time)"
  .venv/bin/uv pip install -q --python "$VENV/bin/python" -r "$LOCK"
  echo "$stamp" > "$VENV/.lakeline-lock"
  log "venv: ready"
fi
.venv/bin/python infra/resolve_jars.py --python .venv/bin/python --kind flink

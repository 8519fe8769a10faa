#!/usr/bin/env bash
# The main job end to end on the embedded defaults: set-up (idempotent), then `lakeline demo`
# (local stack up, produce sample events, ingest into Delta and Iceberg, reconcile, report).
# Extra arguments go to `lakeline demo`, e.g. `bash infra/demo.sh --count 200000 --down`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
exec .venv/bin/lakeline demo "$@"

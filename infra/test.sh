#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this). Set-up (idempotent), then pytest:
#   - default: unit tests + integration tests against the real broker/moto/Spark (~20 min on 2 cores)
#   - with CI=true or LAKELINE_HEAVY=1: also the heavy suites (100k-message runs, kill -9 loops)
# Extra arguments go to pytest, e.g. `bash infra/test.sh tests/unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
marker=(-m "not heavy")
if [ "${CI:-}" = "true" ] || [ "${LAKELINE_HEAVY:-0}" = "1" ]; then
  marker=()
  echo "[test] running every suite, heavy ones included"
fi
exec .venv/bin/python -m pytest -p no:cacheprovider --timeout=1800 --durations=30 "${marker[@]}" "$@"

#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this). Set-up (idempotent), then pytest:
#   - default: unit tests + integration tests against the real broker/moto/Spark
#   - with CI=true or LAKELINE_HEAVY=1: also the heavy suites (every benchmark's quick run included; CI's limit is
#     90 min)
#   - with LAKELINE_SOAK=1: everything, the soak suites included (over two hours on 2 cores)
# The tiers: docs/testing.md. How long each took, and when: CHANGELOG.md.
# Extra arguments go to pytest, e.g. `bash infra/test.sh tests/unit` (test paths given replace `tests`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
marker=(-m "not heavy and not soak")
if [ "${LAKELINE_SOAK:-0}" = "1" ]; then
  marker=()
  echo "[test] running every suite, heavy and soak ones included"
elif [ "${CI:-}" = "true" ] || [ "${LAKELINE_HEAVY:-0}" = "1" ]; then
  marker=(-m "not soak")
  echo "[test] running the default and heavy suites (LAKELINE_SOAK=1 adds the soak suites)"
fi
# Both tiers (`tests`), unless the arguments name their own paths: a plain `pytest` runs the unit tier only.
paths=(tests)
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then
    paths=()
    break
  fi
done
exec .venv/bin/python -m pytest -p no:cacheprovider --timeout=1200 --durations=30 "${marker[@]}" "$@" "${paths[@]}"

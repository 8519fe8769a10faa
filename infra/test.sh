#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this): set-up (idempotent), then the whole suite —
# unit tests, integration tests against the real broker/moto/Spark, and the heavy suites (kill -9 loops,
# 100k-message runs). Extra arguments go to pytest, e.g. `bash infra/test.sh -m "not heavy"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
exec .venv/bin/python -m pytest -p no:cacheprovider --timeout=1800 "$@"

#!/usr/bin/env bash
# Regenerate infra/requirements.lock from pyproject.toml (run after changing a pin; commit both).
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh >/dev/null
.venv/bin/uv pip compile pyproject.toml --extra test --python-version 3.11 -o infra/requirements.lock

#!/usr/bin/env bash
# Airflow for Lakeline's DAGs on this machine: AIRFLOW_HOME in the ignored .lakeline/airflow, the DAGs folder
# pointing at dags/, examples off. The DAG tasks find the local stack through .lakeline/stack/stack.env, so run
# `.venv/bin/lakeline dev up` first.
#   bash infra/airflow.sh              # `airflow standalone`: UI on http://localhost:8080 (login printed at start)
#   bash infra/airflow.sh create-pools # create the pools the DAGs use, from conf/ (standalone does it)
#   bash infra/airflow.sh dags list    # any other airflow command with the same settings
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh >/dev/null
export AIRFLOW_HOME="$PWD/.lakeline/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p "$AIRFLOW_HOME"

create_pools() {
    # maintenance/pools.py: a one-slot pool per table (its compaction and retention never overlap), the files
    # bound's pool, the JVM-free steps' and the drills'.
    airflow db migrate >/dev/null
    local pool_file="$AIRFLOW_HOME/lakeline-pools.json" needed parallelism
    # Written first, so a table file that fails to load stops the script instead of creating no pools.
    needed=$(python - "$pool_file" <<'PY'
import json, os, sys
from pathlib import Path
from maintenance.pools import import_file, pools, slots_needed
declared = pools(Path(os.environ.get("LAKELINE_CONF_DIR", "conf")))
Path(sys.argv[1]).write_text(json.dumps(import_file(declared), indent=1))
for pool in declared:
    print(f"pool {pool.name}: {pool.slots} slot(s)", file=sys.stderr)
print(slots_needed(declared))
PY
    )
    airflow pools import "$pool_file" >/dev/null
    parallelism=$(airflow config get-value core parallelism)
    if [ "$parallelism" -lt "$needed" ]; then
        echo "warning: core.parallelism is $parallelism; the Lakeline pools hold $needed slots, so a queued task" \
             "(a files-bound run) can wait behind others in the executor. Set AIRFLOW__CORE__PARALLELISM>=$needed." >&2
    fi
}

if [ "$#" -eq 0 ]; then
    create_pools
    exec airflow standalone
fi
if [ "$1" = "create-pools" ]; then
    create_pools
    exit 0
fi
exec airflow "$@"

#!/usr/bin/env bash
# Airflow for Lakeline's DAGs on this machine: AIRFLOW_HOME in the ignored .lakeline/airflow, the DAGs folder
# pointing at dags/, examples off. The DAG tasks find the local stack through .lakeline/stack/stack.env, so run
# `.venv/bin/lakeline dev up` first.
#   bash infra/airflow.sh              # `airflow standalone`: UI on http://localhost:8080 (login printed at start)
#   bash infra/airflow.sh create-pools # create the one-slot pool of every table in conf/tables (standalone does it)
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
    # One slot per table: its compaction and retention tasks never run at the same time.
    airflow db migrate >/dev/null
    local table pools
    # Assigned first, so a table file that fails to load stops the script instead of creating no pools.
    pools=$(python - <<'PY'
import os
from pathlib import Path
from maintenance.policy import load_table
from maintenance.tasks import table_pool
conf = Path(os.environ.get("LAKELINE_CONF_DIR", "conf"))
for path in sorted((conf / "tables").glob("*.yaml")):
    print(table_pool(load_table(str(path), conf).name))
PY
    )
    for table in $pools; do
        airflow pools set "$table" 1 "Lakeline: compaction and retention of one table, one at a time" >/dev/null
        echo "pool $table: 1 slot"
    done
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

#!/usr/bin/env bash
# Airflow for Lakeline's DAGs on this machine: AIRFLOW_HOME in the ignored .lakeline/airflow, the DAGs folder
# pointing at dags/, examples off. The DAG tasks find the local stack through .lakeline/stack/stack.env, so run
# `.venv/bin/lakeline dev up` first.
#   bash infra/airflow.sh              # `airflow standalone`: UI on http://localhost:8080 (login printed at start)
#   bash infra/airflow.sh dags list    # any other airflow command with the same settings
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh >/dev/null
export AIRFLOW_HOME="$PWD/.lakeline/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p "$AIRFLOW_HOME"
if [ "$#" -eq 0 ]; then
    exec airflow standalone
fi
exec airflow "$@"

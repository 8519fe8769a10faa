#!/usr/bin/env bash
# A Lakeline pipeline on YARN (Amazon EMR on EC2), the driver in client mode on the primary node.
#
# On the primary node, once: clone the repo and run `bash infra/setup.sh` (Python 3.11, Java 17, Maven). That makes
# the driver's venv, the pinned jars and the executor packages (.lakeline/executor-env/lakeline-env.tar.gz), which
# YARN hands to every executor: the core nodes need only the same Python 3.11 (EMR 7 ships 3.11 as python3.11).
# Endpoints and secrets: in the environment of this script (or LAKELINE_ENV_FILE), never in the pipeline YAML.
# Not run in this project's CI (no YARN there): tests/unit/test_deploy.py checks it statically.
#
#   bash infra/deploy/emr-spark-submit.sh conf/pipelines/orders_delta.yaml [lakeline ingest options ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
pipeline=${1:?usage: emr-spark-submit.sh PIPELINE.yaml [ingest options]}
shift
jars=$(ls .lakeline/jars/spark/*.jar | paste -sd, -)
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_PYTHON=${LAKELINE_EXECUTOR_PYTHON:-/usr/bin/python3.11}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export LAKELINE_SPARK_MASTER=yarn
# Lakeline's own session settings apply on top (ingest.spark.spark_conf): S3A, the LogStore, the catalog, and the
# executor packages as spark.archives; the jars go to the executors through YARN's cache.
exec .venv/bin/spark-submit \
  --master yarn --deploy-mode client \
  --jars "$jars" \
  --conf spark.yarn.maxAppAttempts=1 \
  --conf spark.executor.instances="${LAKELINE_EXECUTORS:-2}" \
  lakeline/__main__.py ingest --pipeline "$pipeline" "$@"

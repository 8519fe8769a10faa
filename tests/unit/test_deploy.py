"""The deployment artifacts under infra/deploy/ that cannot run here (no container engine, Kubernetes or YARN):
checked statically against the code and set-up they depend on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from lakeline.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "infra" / "deploy"
IMAGE_ROOT = "/opt/lakeline/"


def _pinned(package: str) -> str:
    text = (REPO / "pyproject.toml").read_text()
    return re.search(rf'"{re.escape(package)}(?:\[[^\]]*\])?==([^"]+)"', text).group(1)


def _in_repo(image_path: str) -> Path:
    """A path inside the image (/opt/lakeline/...) as the file of the repo it is copied from."""
    path = image_path.removeprefix("local://")
    assert path.startswith(IMAGE_ROOT), path
    return REPO / path[len(IMAGE_ROOT):]


def test_the_image_is_made_by_the_same_set_up_as_everywhere_else():
    steps = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^COPY \. /opt/lakeline$", steps, re.M)
    assert re.search(r"^RUN .*bash infra/setup\.sh", steps, re.M)  # venv, jars and executor packages in one step
    assert "openjdk-17" in steps and "python:3.11" in steps  # what infra/setup.sh requires
    # The paths the image's environment names are where infra/setup.sh puts things.
    spark_home = re.search(r"SPARK_HOME=(\S+)", steps).group(1)
    assert spark_home == "/opt/lakeline/.venv/lib/python3.11/site-packages/pyspark"
    setup = (REPO / "infra" / "setup.sh").read_text()
    assert "-m venv .venv" in setup
    assert "infra.executor_env" in setup and "resolve_jars.py" in setup
    assert f"apache/spark:{_pinned('pyspark')}" in steps  # the entrypoint of the same Spark release


@pytest.mark.parametrize("manifest", sorted((DEPLOY / "k8s").glob("*.yaml")), ids=lambda p: p.name)
def test_spark_operator_manifests_run_a_real_lakeline_command(manifest):
    app = yaml.safe_load(manifest.read_text())
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
    spec = app["spec"]
    assert spec["type"] == "Python" and spec["sparkVersion"] == _pinned("pyspark")
    assert _in_repo(spec["mainApplicationFile"]) == REPO / "lakeline" / "__main__.py"
    args = build_parser().parse_args(spec["arguments"])  # the command and its options exist
    pipelines = getattr(args, "pipeline", None) or []
    for pipeline in [pipelines] if isinstance(pipelines, str) else pipelines:  # ingest takes several
        assert _in_repo(pipeline).is_file()
    if getattr(args, "table", None):
        assert (_in_repo(args.conf_dir) / "tables" / f"{args.table}.yaml").is_file()
    for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
        assert _in_repo(spec["sparkConf"][key].rstrip("*")) == REPO / ".lakeline" / "jars" / "spark"
    # secrets only through a Secret reference, never inline
    text = manifest.read_text()
    assert "AWS_SECRET_ACCESS_KEY" not in text and "sasl.jaas" not in text.lower()
    for role in ("driver", "executor"):
        assert spec[role]["envFrom"] == [{"secretRef": {"name": "lakeline-env"}}]


def test_emr_recipe_parses_and_submits_the_lakeline_main_file():
    script = DEPLOY / "emr-spark-submit.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "--master yarn" in text and "lakeline/__main__.py ingest --pipeline" in text
    assert (REPO / "lakeline" / "__main__.py").is_file()
    assert ".lakeline/jars/spark/*.jar" in text  # where infra/resolve_jars.py puts them

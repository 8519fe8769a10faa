"""A secured broker (`lakeline dev up --kafka-security sasl_ssl|mtls`: TLS only, keys made with keytool, SCRAM
users or client certificates) in a stack of its own: produce, ingest (Delta and Iceberg in one application),
reconcile, freshness and the freshness and checkpoint-backup DAGs (`dag.test()`) work over it unchanged and exactly;
wrong credentials and untrusted certificates fail fast, saying which; and nothing Lakeline or Spark wrote holds the
password or the keystore password (stdout/stderr, logs, Spark event logs, the checkpoint and its backup, every object
in the bucket, JSON output, check-config, the DAGs' task logs and the commands they render).

Costs (2 cores): about 3 min per mode (a stack of its own, five Spark drivers). Heavy: CI runs both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import boto3
import pytest
import yaml

from infra import stack as local_stack
from infra.kafka_security import make_security
from infra.procs import ComponentError
from tests.helpers import captured_task_logs, lakeline_json, load_dag, pipeline_dict

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


@pytest.fixture(params=["sasl_ssl", "mtls"])
def secured(request, tmp_path_factory):
    """A stack whose broker takes only TLS clients of `mode`; its environment (secrets included)."""
    state = tmp_path_factory.mktemp(f"secured-{request.param}")
    try:
        info = local_stack.up(state, kafka_security_mode=request.param)
    except ComponentError as exc:
        pytest.fail(f"the secured stack could not start: {exc}", pytrace=False)
    events = state / "spark-events"
    events.mkdir()
    env = {**os.environ, **info.env(), "LAKELINE_STATE_DIR": str(state), "LAKELINE_ENV_FILE": "",
           "LAKELINE_SPARK_CONF": f'{{"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://{events}"}}'}
    yield request.param, info, env, state
    local_stack.down(state)


def run(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lakeline", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.soak  # a secured broker, two pipelines and the DAGs, per protocol: several minutes each
def test_pipelines_over_a_secured_broker_are_exact_and_leak_no_secret(secured, tmp_path, airflow_db, monkeypatch):
    mode, info, env, state = secured
    conf = tmp_path / "conf" / "pipelines"  # where the DAG files look (LAKELINE_CONF_DIR/pipelines)
    conf.mkdir(parents=True)
    paths = []
    for fmt in ("delta", "iceberg"):
        path = conf / f"secured_{mode}_{fmt}.yaml"
        path.write_text(yaml.safe_dump(pipeline_dict(fmt, name=f"secured_{mode}_{fmt}")))
        paths.append(path)
    outputs = []

    def ok(*args: str, timeout: float = 600) -> str:
        done = run(env, *args, timeout=timeout)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done.stdout

    produced = {}
    for path in paths:
        produced[path] = yaml.safe_load(ok("produce", "--pipeline", str(path), "--count", "3000", "--bad-ratio",
                                           "0.01", "--seed", "5"))
    ok("--log-format", "json", "ingest", *[a for p in paths for a in ("--pipeline", str(p))], "--trigger",
       "available-now")
    for path in paths:
        report = yaml.safe_load(ok("reconcile", "--pipeline", str(path), "--output", "json"))
        assert report["duplicates"] == 0 and report["missing"] == 0 and report["produced"] == 3000, report
        assert report["dead_letters"] == produced[path]["bad_total"]
        fresh = yaml.safe_load(ok("freshness", "--pipeline", str(path), "--output", "json"))
        assert fresh["ok"] and fresh["lag_records"] == 0, fresh
    outputs.append(ok("check-config", "--pipeline", str(paths[0])))

    # The DAGs, as a scheduler runs them: their tasks launch `lakeline` with the worker's environment.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LAKELINE_CONF_DIR", str(conf.parent))
    # the task logs: Airflow's lines and each `lakeline` command's, passed on by its task (maintenance.tasks)
    with captured_task_logs() as logged:
        fresh_run = load_dag("lakeline_freshness").test()
        backup_run = load_dag(f"lakeline_checkpoint_backup__secured_{mode}_delta").test()
    task_logs = logged.getvalue()
    assert fresh_run.state == "success", [(ti.task_id, ti.state) for ti in fresh_run.get_task_instances()]
    checked = [ti for ti in fresh_run.get_task_instances() if ti.task_id == "check"]
    assert len(checked) == 2 and all(ti.state == "success" for ti in checked)
    assert backup_run.state == "success"
    made = backup_run.get_task_instance("backup").xcom_pull(task_ids="backup")
    assert made["backup_id"] and backup_run.get_task_instance("verify").xcom_pull(task_ids="verify")["ok"] is True
    # the task logs and what the tasks returned (their XComs), searched below
    assert all(f"end task task_id={task}" in task_logs for task in ("check", "backup", "verify")), task_logs[-2000:]
    outputs += [task_logs, json.dumps([ti.xcom_pull(task_ids="check", map_indexes=ti.map_index) for ti in checked]),
                json.dumps(made)]

    # The secrets, as the stack made them; only its 0600 files hold them.
    client = info.kafka_client_env()
    secrets = [v for k, v in client.items() if k.endswith("PASSWORD")]
    assert secrets and all(len(s) >= 16 for s in secrets)
    for holder in ("stack.env", "server.properties"):  # the client's secrets; the broker's keystore passwords
        assert oct((state / "stack" / holder).stat().st_mode)[-3:] == "600", holder

    # The commands the DAGs render (maintenance.tasks), under both launchers.
    from maintenance import tasks

    rendered = [" ".join(tasks.lakeline_command(["ingest", "--pipeline", str(p)], environ=env)) for p in paths]
    rendered += [" ".join(tasks.lakeline_command(["checkpoint", "backup", "--pipeline", str(paths[0])],
                                                 environ={**env, "LAKELINE_TASK_LAUNCHER": "spark-submit",
                                                          "LAKELINE_SPARK_MASTER": "spark://127.0.0.1:7077"}))]
    # Every file Lakeline and Spark wrote: the state folder (logs, Spark event logs) but the secured broker's own
    # key folder, its env file and its properties (where the secrets belong), and every object in the bucket
    # (tables, checkpoints, the backup, the lease).
    allowed = {state / "stack" / "stack.env", state / "stack" / "server.properties"}
    files = [p for p in state.rglob("*") if p.is_file() and p not in allowed
             and "kafka-security" not in p.parts and "kafka-data" not in p.parts]
    assert any("spark-events" in p.parts for p in files), "Spark wrote no event log"
    texts = {str(p): p.read_bytes() for p in files}
    texts |= {f"output {i}": text.encode() for i, text in enumerate(outputs + rendered)}
    s3 = boto3.client("s3", endpoint_url=info.moto_endpoint, region_name="us-east-1",
                      aws_access_key_id="lakeline-local", aws_secret_access_key="lakeline-local")
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="lakeline")
            for o in page.get("Contents", [])]
    assert any("_checkpoints" in k for k in keys) and any("backups" in k or "backup" in k for k in keys), keys[:20]
    texts |= {f"s3://lakeline/{k}": s3.get_object(Bucket="lakeline", Key=k)["Body"].read() for k in keys}
    leaks = [name for name, body in texts.items() for secret in secrets if secret.encode() in body]
    assert not leaks, f"{len(leaks)} place(s) hold a secret: {leaks[:10]}"
    print(f"[secured {mode}] searched {len(texts)} files, objects and outputs for {len(secrets)} secret(s): 0 hits")


def test_wrong_credentials_and_untrusted_certificates_fail_fast_saying_which(secured, tmp_path):
    mode, info, env, _ = secured
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict("delta", name=f"refused_{mode}")))
    other = make_security(mode, tmp_path / "other")  # another CA, another client certificate
    cases = {"untrusted broker certificate": ({"LAKELINE_KAFKA_SSL_CA_LOCATION": str(tmp_path / "other" / "ca.pem")},
                                              "TLS certificate is not trusted")}
    if mode == "sasl_ssl":
        cases["wrong password"] = ({"LAKELINE_KAFKA_SASL_PASSWORD": "not-the-password"},
                                   "refused the credentials of user 'lakeline'")
    else:
        cases["client certificate of another CA"] = (
            {k: v for k, v in other.client_env.items() if "KEYSTORE" in k}, "TLS handshake")
        cases["wrong keystore password"] = ({"LAKELINE_KAFKA_SSL_KEYSTORE_PASSWORD": "wrong"}, "keystore")
    for case, (override, says) in cases.items():
        started = time.monotonic()
        done = run({**env, **override}, "produce", "--pipeline", str(path), "--count", "10", timeout=120)
        took = time.monotonic() - started
        assert done.returncode == 2, (case, done.stdout[-2000:], done.stderr[-2000:])
        error = [line for line in done.stderr.splitlines() if line.startswith("lakeline: error:")]
        assert error and says in error[0], (case, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, (case, done.stderr[-2000:])
        assert took < 20, (case, took)  # not a hang
        print(f"[secured {mode}] {case}: exit 2 in {took:.1f}s: {error[0][:160]}")
    # the pipeline's start says the same before Spark's consumer ever connects
    if mode == "sasl_ssl":
        done = run({**env, "LAKELINE_KAFKA_SASL_PASSWORD": "not-the-password"}, "ingest", "--pipeline", str(path),
                   "--trigger", "available-now", timeout=300)
        assert done.returncode == 2 and "refused the credentials" in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and "at org.apache" not in done.stderr, done.stderr[-2000:]


# Soak (about 3.5 min per mode, past CI's budget): a recovery drill over the secured broker, as its DAG runs it.
@pytest.mark.soak
def test_a_drill_over_a_secured_broker_passes(secured, tmp_path):
    mode, _, env, _ = secured
    path = tmp_path / f"drilled_{mode}.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict("delta", name=f"drilled_{mode}")))
    report = lakeline_json(env, "drill", "--pipeline", str(path), "--scenario", "kill", "--events", "2000",
                           "--batch-size", "400", timeout=900)
    [kill] = report["scenarios"]
    assert report["passed"] and kill["duplicates"] == 0 and kill["missing"] == 0, report
    print(f"[secured {mode}] kill drill passed, recovery {kill['recovery_seconds']}s")

"""The SQL endpoint's pure parts: the views that name the tables, the servers' Spark settings, the refusal to serve
another address without authentication, the beeline command line and the stack's record of the endpoint."""

import subprocess

import pytest
from pydantic import SecretStr

from infra.stack import StackInfo
from ingest.config import load_pipeline
from ingest.errors import ConfigError
from ingest.settings import Settings
from ingest.sql_endpoint import (CONNECT_PLUGIN, beeline, beeline_command, check_exposure, connect_url, endpoint_conf,
                                 jdbc_url, registrations, server_conf)
from tests.helpers import pipeline_dict, write_pipeline


def _settings(jars=None, **fields) -> Settings:
    return Settings(warehouse="s3a://bucket/wh", iceberg_catalog_uri="sqlite:////tmp/c.db",
                    spark_jars_dir=str(jars) if jars else None, **fields)


def test_each_table_is_a_view_by_its_analyst_name_over_the_format_s_own_name(tmp_path):
    shared = [load_pipeline(write_pipeline(tmp_path, pipeline_dict(fmt, name=f"orders_{fmt}",
                                                                   sink={"format": fmt, "table": "orders",
                                                                         "namespace": "sales"})))
              for fmt in ("delta", "iceberg")]
    alone = load_pipeline(write_pipeline(tmp_path, pipeline_dict("delta", name="clicks_pipe",
                                                                 sink={"format": "delta", "table": "clicks"})))
    found = {r.name: r for r in registrations([*shared, alone], _settings())}
    assert sorted(found) == ["clicks", "clicks_dead_letters", "orders_delta", "orders_delta_dead_letters",
                             "orders_iceberg", "orders_iceberg_dead_letters"]
    assert found["orders_delta"].sql == ("CREATE VIEW IF NOT EXISTS `orders_delta` WITH SCHEMA EVOLUTION AS "
                                         "SELECT * FROM delta.`s3a://bucket/wh/delta/orders`")
    assert found["orders_iceberg_dead_letters"].source == "lakeline.sales.orders_dead_letters"
    assert found["clicks_dead_letters"].source == "delta.`s3a://bucket/wh/delta/clicks_dead_letters`"
    assert found["clicks"].pipeline == "clicks_pipe"


def test_the_servers_listen_on_loopback_without_authentication_by_default(jars):
    conf = server_conf(_settings(jars, sql_endpoint_port=10101, sql_endpoint_connect_port=15151))
    assert conf["spark.plugins"] == CONNECT_PLUGIN
    assert conf["spark.connect.grpc.binding.address"] == conf["spark.hadoop.hive.server2.thrift.bind.host"] \
        == "127.0.0.1"
    assert (conf["spark.hadoop.hive.server2.thrift.port"], conf["spark.connect.grpc.binding.port"]) == \
        ("10101", "15151")
    assert conf["spark.hadoop.hive.server2.transport.mode"] == "binary"
    assert conf["spark.hadoop.hive.server2.authentication"] == "NONE"
    assert "spark.connect.authenticate.token" not in conf
    # the session ingest.spark builds: both formats' catalogs
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.sql.catalog.lakeline"] == "org.apache.iceberg.spark.SparkCatalog"


def test_an_operator_s_plugins_and_authentication_are_kept_and_the_token_reaches_spark_connect():
    settings = _settings(spark_conf={"spark.plugins": "com.example.Audit",
                                     "spark.hadoop.hive.server2.authentication": "LDAP"},
                         sql_endpoint_token=SecretStr("s3cret"), sql_endpoint_host="0.0.0.0")
    conf = endpoint_conf(settings)
    assert conf["spark.plugins"] == f"com.example.Audit,{CONNECT_PLUGIN}"
    assert conf["spark.hadoop.hive.server2.authentication"] == "LDAP"
    assert conf["spark.connect.authenticate.token"] == "s3cret"
    check_exposure(settings)  # authenticated on both protocols: served on every address
    assert jdbc_url(settings) == "jdbc:hive2://127.0.0.1:10000/default"  # a wildcard bind is reached on loopback
    assert connect_url(settings) == "sc://127.0.0.1:15002"


@pytest.mark.parametrize("fields, named", [
    ({}, ["hive.server2.authentication", "LAKELINE_SQL_ENDPOINT_TOKEN"]),
    ({"sql_endpoint_token": SecretStr("t")}, ["hive.server2.authentication"]),
    ({"spark_conf": {"spark.hadoop.hive.server2.authentication": "NOSASL"}, "sql_endpoint_token": SecretStr("t")},
     ["hive.server2.authentication"]),
    ({"spark_conf": {"spark.hadoop.hive.server2.authentication": "KERBEROS"}}, ["LAKELINE_SQL_ENDPOINT_TOKEN"]),
])
def test_another_address_without_authentication_on_both_protocols_is_refused_naming_what_is_missing(fields, named):
    with pytest.raises(ConfigError) as refused:
        check_exposure(_settings(sql_endpoint_host="10.1.2.3", **fields))
    message = str(refused.value)
    assert "LAKELINE_SQL_ENDPOINT_HOST=10.1.2.3" in message and all(key in message for key in named)
    check_exposure(_settings(sql_endpoint_host="127.0.0.1", **fields))  # loopback: served as asked


def test_beeline_is_hive_s_jdbc_client_from_pyspark_s_jars_against_the_endpoint():
    command = beeline_command(_settings(sql_endpoint_port=10123), "SELECT 1")
    assert command[command.index("-cp") + 1].endswith("pyspark/jars/*")
    assert "org.apache.hive.beeline.BeeLine" in command
    assert command[command.index("-u") + 1] == "jdbc:hive2://127.0.0.1:10123/default"
    assert command[-2:] == ["-e", "SELECT 1"] and "--outputformat=csv2" in command


def test_the_stack_writes_the_endpoint_s_ports_to_its_env_only_while_it_has_one():
    info = StackInfo(kafka_pid=1, kafka_bootstrap="127.0.0.1:9", moto_pid=2, moto_endpoint="http://127.0.0.1:8",
                     catalog_db="/tmp/c.db", warehouse="s3a://lakeline/warehouse", state="/tmp/s")
    assert not any(key.startswith("LAKELINE_SQL_ENDPOINT") for key in info.env())
    info.sql_endpoint_pid, info.sql_endpoint_port, info.sql_endpoint_connect_port = 3, 10001, 15003
    assert {k: v for k, v in info.env().items() if k.startswith("LAKELINE_SQL_ENDPOINT")} == {
        "LAKELINE_SQL_ENDPOINT_PORT": "10001", "LAKELINE_SQL_ENDPOINT_CONNECT_PORT": "15003"}


def test_beeline_s_output_is_split_into_each_statement_s_rows(monkeypatch):
    stdout = ("n\n3\nlakeline_statement_end\nlakeline_statement_end\n"
              "tier,n\n,1\ngold,\"2,5\"\nlakeline_statement_end\nlakeline_statement_end\n"
              "_error,n\nlakeline_statement_end\nlakeline_statement_end\n")
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda command, **_: ran.append(command) or
                        subprocess.CompletedProcess(command, 0, stdout, ""))
    rows = beeline(_settings(), ["SELECT count(*) AS n FROM t", "SELECT tier, n FROM u;", "SELECT _error FROM v"])
    assert rows == [[("3",)], [("", "1"), ("gold", "2,5")], []]
    assert ran[0][-1].count("SELECT 'lakeline_statement_end'") == 3 and ";;" not in ran[0][-1]

import pytest

from ingest.errors import ConfigError
from ingest.settings import Settings
from ingest.spark import jdbc_uri, spark_conf


def test_local_endpoint_uses_path_style_s3a_and_shared_catalog(jars):
    settings = Settings(s3_endpoint="http://127.0.0.1:9999", aws_access_key_id="a", aws_secret_access_key="b",
                        warehouse="s3a://bucket/wh", iceberg_catalog_uri="sqlite:////tmp/c.db",
                        spark_jars_dir=str(jars))
    conf = spark_conf(settings, "t")
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9999"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.sql.catalog.lakeline.uri"] == "jdbc:sqlite:/tmp/c.db"
    assert conf["spark.sql.catalog.lakeline.jdbc.schema-version"] == "V1"
    # VACUUM honours the window `lakeline retain` asks for (Delta 4 ignores it by default)
    assert conf["spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"] == "false"
    assert "spark.jars.packages" not in conf
    # local[N]: the jars go on the one JVM's classpath (spark.jars would copy ~700 MB to a temp folder per start)
    assert conf["spark.driver.extraClassPath"].count(".jar") == 3
    assert "spark.jars" not in conf


def test_cluster_master_ships_jars_with_spark_jars(jars):
    conf = spark_conf(Settings(spark_master="spark://host:7077", spark_jars_dir=str(jars)), "t")
    assert conf["spark.jars"].count(".jar") == 3
    assert "spark.driver.extraClassPath" not in conf


def test_jars_installed_on_the_workers_go_on_the_classpath_and_a_loopback_master_binds_to_loopback(jars):
    from ingest.spark import on_loopback

    conf = spark_conf(Settings(spark_master="spark://127.0.0.1:7077", spark_jars_dir=str(jars),
                               spark_jars_on_workers=True), "t")
    assert conf["spark.executor.extraClassPath"].count(".jar") == 3
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"]
    assert "spark.jars" not in conf
    assert on_loopback("spark://127.0.0.1:7077") and on_loopback("spark://localhost:7077")
    assert not on_loopback("spark://10.0.0.5:7077") and not on_loopback("local[2]") and not on_loopback("yarn")


def test_iceberg_catalog_commits_through_the_fence(jars):
    conf = spark_conf(Settings(iceberg_catalog_uri="sqlite:////tmp/c.db", spark_jars_dir=str(jars)), "t")
    assert conf["spark.sql.catalog.lakeline.catalog-impl"] == "io.lakeline.iceberg.FencingCatalog"
    assert conf["spark.sql.catalog.lakeline.lakeline.delegate-type"] == "jdbc"
    assert "spark.sql.catalog.lakeline.type" not in conf  # Iceberg refuses both type and catalog-impl


def test_an_http_catalog_uri_is_a_rest_catalog_for_spark_with_its_credential_kept_secret(jars):
    settings = Settings(iceberg_catalog_uri="https://polaris.example/api/catalog", spark_jars_dir=str(jars),
                        iceberg_catalog_credential="client:s3cr3t")
    conf = spark_conf(settings, "t")
    assert conf["spark.sql.catalog.lakeline.lakeline.delegate-type"] == "rest"
    assert conf["spark.sql.catalog.lakeline.uri"] == "https://polaris.example/api/catalog"
    assert conf["spark.sql.catalog.lakeline.credential"] == "client:s3cr3t"
    assert "spark.sql.catalog.lakeline.jdbc.schema-version" not in conf
    assert "s3cr3t" not in str(settings.describe())


def test_jvm_started_by_spark_submit_keeps_spark_jars(jars, monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4242")  # the classpath of a running JVM can no longer change
    conf = spark_conf(Settings(spark_jars_dir=str(jars)), "t")
    assert conf["spark.jars"].count(".jar") == 3
    on_workers = spark_conf(Settings(spark_master="spark://127.0.0.1:7077", spark_jars_dir=str(jars),
                                     spark_jars_on_workers=True), "t")
    # the driver's classpath came from spark-submit's --driver-class-path; the executors take the installed jars
    assert on_workers["spark.executor.extraClassPath"].count(".jar") == 3
    assert "spark.jars" not in on_workers and "spark.driver.extraClassPath" not in on_workers


def test_delta_on_s3_commits_with_conditional_put(jars):
    conf = spark_conf(Settings(warehouse="s3a://prod/wh", spark_jars_dir=str(jars)), "t")
    assert conf["spark.delta.logStore.s3a.impl"] == "io.lakeline.delta.S3ConditionalPutLogStore"
    assert conf["spark.delta.logStore.s3.impl"] == "io.lakeline.delta.S3ConditionalPutLogStore"
    assert conf["spark.hadoop.fs.s3a.create.conditional.enabled"] == "true"
    assert "lakeline-spark-runtime.jar" in conf["spark.driver.extraClassPath"]


def test_checkpoint_entries_are_written_without_rename(jars):
    conf = spark_conf(Settings(spark_jars_dir=str(jars)), "t")
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == "io.lakeline.spark.S3DirectCheckpointFileManager"


def test_real_s3_by_configuration_alone(jars):
    conf = spark_conf(Settings(warehouse="s3a://prod/wh", spark_jars_dir=str(jars)), "t")
    assert "spark.hadoop.fs.s3a.endpoint" not in conf
    assert "spark.hadoop.fs.s3a.access.key" not in conf  # default AWS credential chain


def test_missing_jars_say_how_to_fix(tmp_path):
    with pytest.raises(ConfigError, match="infra/setup.sh"):
        spark_conf(Settings(spark_jars_dir=str(tmp_path)), "t")


def test_jdbc_uri():
    assert jdbc_uri("sqlite:////a/b.db") == "jdbc:sqlite:/a/b.db"
    with pytest.raises(ConfigError, match="LAKELINE_ICEBERG_CATALOG_URI"):
        jdbc_uri("postgres://x")


def test_split_s3_uri():
    from ingest.adapters.object_store import split_s3_uri

    assert split_s3_uri("s3a://bucket/a/b") == ("bucket", "a/b")
    assert split_s3_uri("s3://bucket/k") == ("bucket", "k")
    with pytest.raises(ValueError, match="not an s3"):
        split_s3_uri("/local/path")


def test_operator_spark_conf_overrides_the_defaults(jars, monkeypatch):
    from ingest.settings import load_settings

    monkeypatch.setenv("LAKELINE_SPARK_CONF",
                       '{"spark.sql.shuffle.partitions": 8, "spark.sql.adaptive.enabled": false}')
    monkeypatch.setenv("LAKELINE_SPARK_JARS_DIR", str(jars))
    settings = load_settings()
    conf = spark_conf(settings, "t")
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.sql.adaptive.enabled"] == "false"


def test_pipeline_session_caches_uncompressed_unless_the_operator_says_otherwise(jars, monkeypatch):
    from ingest.pipeline import PIPELINE_SPARK_DEFAULTS as pipeline
    from ingest.settings import load_settings

    monkeypatch.setenv("LAKELINE_SPARK_JARS_DIR", str(jars))
    key = "spark.sql.inMemoryColumnarStorage.compressed"
    settings = load_settings()
    assert key not in spark_conf(settings, "t")  # other commands (reconcile) keep Spark's default
    assert spark_conf(settings, "t", defaults=pipeline)[key] == "false"
    monkeypatch.setenv("LAKELINE_SPARK_CONF", '{"%s": true}' % key)
    operator = load_settings()
    assert spark_conf(operator, "t", defaults=pipeline)[key] == "true"


@pytest.mark.parametrize("value,names", [("{not json", "not valid JSON"), ('["spark.x"]', "JSON object"),
                                         ('{"sql.shuffle.partitions": "8"}', 'start with "spark."')])
def test_bad_operator_spark_conf_names_the_variable(value, names, monkeypatch):
    from ingest.settings import load_settings

    monkeypatch.setenv("LAKELINE_SPARK_CONF", value)
    with pytest.raises(ConfigError, match=f"LAKELINE_SPARK_CONF.*{names}"):
        load_settings()


class TestClassArchive:
    """The JVM class archive (AppCDS) a local driver starts from: used when one was made for exactly this JVM and
    these jars, never on a cluster master, off by LAKELINE_CLASS_ARCHIVE=off; the trainer's run writes one."""

    @pytest.fixture
    def archive(self, jars, tmp_path, monkeypatch):
        from ingest.spark import class_archive

        monkeypatch.setenv("LAKELINE_JVM_DIR", str(tmp_path / "jvm"))
        monkeypatch.delenv("LAKELINE_CLASS_ARCHIVE", raising=False)
        monkeypatch.delenv("LAKELINE_CLASS_ARCHIVE_DUMP", raising=False)
        path = class_archive(sorted(str(p) for p in jars.glob("*.jar")))
        path.parent.mkdir(parents=True)
        path.write_bytes(b"archive")
        path.with_suffix(".json").write_text('{"size": 7}')  # as the trainer records it once checked
        return path

    def test_a_local_driver_starts_from_the_archive(self, jars, archive):
        options = spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]
        assert f"-XX:SharedArchiveFile={archive}" in options
        assert options.startswith("-Dlog4j2.configurationFile=")

    def test_no_archive_for_these_jars_means_a_plain_start(self, jars, archive):
        (jars / "iceberg-spark-runtime-4.1_2.13-1.11.0.jar").write_bytes(b"a newer build")
        options = spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]
        assert "SharedArchiveFile" not in options and "XX:" not in options

    def test_switched_off(self, jars, archive, monkeypatch):
        monkeypatch.setenv("LAKELINE_CLASS_ARCHIVE", "off")
        assert "XX:" not in spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]

    def test_not_on_a_cluster_master(self, jars, archive):
        conf = spark_conf(Settings(spark_master="spark://host:7077", spark_jars_dir=str(jars)), "t")
        assert "XX:" not in conf["spark.driver.extraJavaOptions"]

    def test_the_trainer_writes_one(self, jars, archive, monkeypatch, tmp_path):
        monkeypatch.setenv("LAKELINE_CLASS_ARCHIVE_DUMP", str(tmp_path / "new.partial"))
        options = spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]
        assert f"-XX:ArchiveClassesAtExit={tmp_path / 'new.partial'}" in options
        assert "SharedArchiveFile" not in options

    def test_a_truncated_archive_is_not_used(self, jars, archive):
        """Java 17 maps an archive without checking its length (a truncated one crashed the JVM with SIGBUS when
        tried): only an archive of the size recorded when it was checked is used."""
        archive.chmod(0o644)
        archive.write_bytes(b"arch")
        assert "XX:" not in spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]
        archive.with_suffix(".json").unlink()
        archive.write_bytes(b"archive")
        assert "XX:" not in spark_conf(Settings(spark_jars_dir=str(jars)), "t")["spark.driver.extraJavaOptions"]


def test_every_session_writes_parquet_timestamps_as_int64_micros(jars, monkeypatch):
    """INT96 (Spark's default) cost a Delta write 6 % of its task time; the operator can still ask for it."""
    from ingest.settings import load_settings

    monkeypatch.setenv("LAKELINE_SPARK_JARS_DIR", str(jars))
    key = "spark.sql.parquet.outputTimestampType"
    assert spark_conf(load_settings(), "t")[key] == "TIMESTAMP_MICROS"
    monkeypatch.setenv("LAKELINE_SPARK_CONF", '{"%s": "INT96"}' % key)
    assert spark_conf(load_settings(), "t")[key] == "INT96"

"""SparkSession factory: Delta + Iceberg extensions, the shared Iceberg catalog, S3A, and the pinned jars.

Nothing here runs at import time; call `build_spark()`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.errors import ConfigError
from ingest.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J2 = Path(__file__).resolve().parent.parent / "infra" / "spark-log4j2.properties"
_LOG4J2_JSON = _LOG4J2.with_name("spark-log4j2-json.properties")  # layered over _LOG4J2 by --log-format json
# Layered over _LOG4J2 unless LAKELINE_LIBRARY_LOGS=all: library loggers whose output is noise to an operator.
_LOG4J2_QUIET = _LOG4J2.with_name("spark-log4j2-quiet.properties")
# What the driver JVM writes to stderr before (or outside) log4j, on every start: the launcher's notice that Spark
# adds the incubator Vector API module, and the AWS SDK's shaded SLF4J 1.x finding no binding (it then logs
# nothing, which is what Lakeline wants of it). Dropped unless LAKELINE_LIBRARY_LOGS=all.
JVM_NOISE = ("WARNING: Using incubator modules:", "SLF4J: ", "SLF4J(W): ", "SLF4J(I): ")
# Lakeline's own JVM classes, built and tested by infra/setup.sh from the Maven module jvm/. Delta commits on S3
# with a conditional PUT (If-None-Match: *), so several drivers (the stream, maintenance) can write one table
# (ARCHITECTURE.md, "Maintenance beside live streams"); and the strict one-pass record decoder (ingest.transforms).
SPARK_RUNTIME_JAR = "lakeline-spark-runtime.jar"
DELTA_S3_LOGSTORE = "io.lakeline.delta.S3ConditionalPutLogStore"
# From the same jar: Spark's checkpoint entries (offsets/N, commits/N) and Delta's N.crc written on s3a:// as one
# direct (conditional) PUT each instead of write-temp-then-rename, which S3 runs as copy + delete.
S3_CHECKPOINT_FILE_MANAGER = "io.lakeline.spark.S3DirectCheckpointFileManager"
# From the same jar: any Iceberg catalog whose table commits check the pipeline's fence (ingest.lease).
FENCING_CATALOG = "io.lakeline.iceberg.FencingCatalog"
# From the same jar: SIGTERM to the JVM passed on to the Python driver (`pass_jvm_sigterm_to_driver`).
STOP_SIGNAL = "io.lakeline.spark.StopSignal"


# A JVM class-data archive (AppCDS) of the classes a Lakeline driver loads, made once per machine by
# `lakeline dev class-archive` (infra/setup.sh runs it): a local driver maps them instead of loading and verifying
# each class from its jar, which cuts about 5 s from every start and first batch (bench/results/). Settings
# class_archive ("off", or another archive's path: the trainer checks a new one so) and class_archive_dump (the
# trainer's run writes the archive of the classes it loaded there as its JVM exits).
# The JVM reports an archive it cannot use (another classpath) and starts without it; Lakeline's key already
# tells such archives apart, so those lines would only be noise on every start.
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"


def class_archive(jars: list[str]) -> Path:
    """Where the class archive for this JVM, pyspark and exact set of jars lives (the file need not exist). The
    name hashes what the JVM checks when it maps an archive: the java binary, and each classpath jar's name, size
    and modification time."""
    import pyspark

    from infra.paths import jvm_dir

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    entries = [Path(java).resolve()] if java else []
    entries += sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")) + [Path(j) for j in jars]
    parts = [pyspark.__version__] + [f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in entries if p.exists()]
    return jvm_dir() / f"spark-{hashlib.sha256(chr(10).join(parts).encode()).hexdigest()[:16]}.jsa"


def archive_is_complete(archive: Path) -> bool:
    """Whether `archive` is whole: its size is the one recorded once it was checked (`<name>.json`). Java 17 maps an
    archive without checking its length, and a truncated one (a full disk, a partial copy) crashes the JVM."""
    import json

    try:
        recorded = json.loads(archive.with_suffix(".json").read_text())["size"]
        return archive.stat().st_size == recorded
    except (OSError, ValueError, KeyError, TypeError):
        return False


def archive_is_mapped(spark: "SparkSession", archive: Path) -> bool:
    """Whether this session's driver JVM has `archive` mapped into its memory, i.e. started from it (a JVM that
    cannot use an archive starts without it)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # noqa: SLF001 - py4j
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return any(line.split(maxsplit=5)[5:] == [str(archive)] for line in maps)


def driver_logging(settings: Settings, app_name: str) -> str:
    """The driver JVM's log4j2 options: warnings on stderr as plain lines, or (`LAKELINE_LOG_FORMAT=json`) one
    JSON object per line naming the application; library noise off unless LAKELINE_LIBRARY_LOGS=all."""
    files = [_LOG4J2] + ([_LOG4J2_QUIET] if settings.library_logs == "quiet" else [])
    if settings.log_format != "json":
        return f"-Dlog4j2.configurationFile={','.join(f'file:{f}' for f in files)}"
    app = "".join(c if c.isalnum() or c in "-_." else "_" for c in app_name)
    files.append(_LOG4J2_JSON)
    return f"-Dlog4j2.configurationFile={','.join(f'file:{f}' for f in files)} -Dlakeline.app={app}"


def is_jvm_noise(line: bytes) -> bool:
    return line.decode("utf-8", "replace").startswith(JVM_NOISE)


def _launch_quiet_gateway(conf: dict[str, str]) -> None:
    """Start the driver JVM with its stderr through a pipe that drops `JVM_NOISE` and passes every other line on to
    this process's stderr as it comes (pyspark's `launch_gateway` takes Popen arguments for this). The pipe is read
    from before the JVM starts, so a JVM that fails to start still says why. The session then uses this gateway.
    Nothing happens when a JVM already runs (an earlier session, or spark-submit)."""
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):  # noqa: SLF001
        return
    read_end, write_end = os.pipe()
    out = os.dup(2)  # stays open for the JVM's lines even if sys.stderr is replaced later

    def pump() -> None:
        with os.fdopen(read_end, "rb") as stream:
            for line in stream:
                if not is_jvm_noise(line):
                    try:
                        os.write(out, line)
                    except OSError:
                        return

    threading.Thread(target=pump, name="lakeline-jvm-stderr", daemon=True).start()
    try:
        gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(conf.items()),
                                 popen_kwargs={"stderr": write_end})
    finally:
        os.close(write_end)  # the JVM holds its own copy; the pipe ends when the JVM does
    SparkContext._ensure_initialized(gateway=gateway)  # noqa: SLF001


def _class_archive_options(settings: Settings, jars: list[str]) -> str:
    """The driver JVM options that use the class archive (or, for the trainer, write it); "" when there is none."""
    chosen = settings.class_archive
    if chosen.lower() == "off":
        return ""
    dump = settings.class_archive_dump
    if dump:
        return f" -XX:ArchiveClassesAtExit={dump} {_QUIET_CDS}"
    if chosen:
        return f" -XX:SharedArchiveFile={Path(chosen).resolve()} {_QUIET_CDS}"
    archive = class_archive(jars)
    return f" -XX:SharedArchiveFile={archive} {_QUIET_CDS}" if archive_is_complete(archive) else ""


def spark_jars(settings: Settings) -> list[str]:
    """The connector jars resolved by infra/setup.sh (or LAKELINE_SPARK_JARS_DIR)."""
    from infra.paths import jars_dir

    folder = Path(settings.spark_jars_dir) if settings.spark_jars_dir else jars_dir("spark")
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    needed = ("delta-spark", "iceberg-spark-runtime", SPARK_RUNTIME_JAR)
    if not all(any(name in j for j in jars) for name in needed):
        raise ConfigError(f"Spark connector jars are missing in {folder}: run `bash infra/setup.sh` "
                          f"(or set LAKELINE_SPARK_JARS_DIR to a folder holding them).")
    return jars


def is_rest_catalog(catalog_uri: str) -> bool:
    """An http(s):// catalog URI is an Iceberg REST catalog (the local stack's server, Polaris, Glue, Unity)."""
    return catalog_uri.startswith(("http://", "https://"))


def jdbc_uri(catalog_uri: str) -> str:
    """pyiceberg's SQLAlchemy URI -> the JDBC URI Iceberg's JdbcCatalog wants (same SQLite file)."""
    if catalog_uri.startswith("sqlite:///"):
        return "jdbc:sqlite:" + catalog_uri[len("sqlite:///"):]
    if catalog_uri.startswith("jdbc:"):
        return catalog_uri
    raise ConfigError(f"LAKELINE_ICEBERG_CATALOG_URI={catalog_uri!r}: use sqlite:////abs/path.db (embedded), "
                      f"a jdbc: URI, or an Iceberg REST catalog's http(s):// URI.")


# The folder executors unpack the packed Python packages into (spark.archives <archive>#lakeline_env); it is their
# PYTHONPATH, beside Spark's own and the code zip.
EXECUTOR_PACKAGES_DIR = "lakeline_env"


def executor_packages(settings: Settings) -> Path | None:
    """The packed Python packages a driver on a cluster master ships to its executors (infra.executor_env), or
    None: local mode, LAKELINE_EXECUTOR_ENV=off, or not packed yet (then executors run `settings.python`, which
    must exist with the packages at the same path on every worker)."""
    from infra.paths import executor_archive

    if settings.spark_master.startswith("local") or settings.executor_env.lower() == "off":
        return None
    if settings.executor_env:
        chosen = Path(settings.executor_env)
        if not chosen.is_file():
            raise ConfigError(f"LAKELINE_EXECUTOR_ENV={settings.executor_env!r} is not a file: give the archive "
                              f"`python -m infra.executor_env` made, or 'off'.")
        return chosen.resolve()
    archive = executor_archive()
    if archive.is_file():
        return archive
    logging.getLogger(__name__).warning(
        f"no packed executor packages at {archive} (`bash infra/setup.sh` makes them): executors will run "
        f"{settings.python} and need Lakeline's dependencies installed there")
    return None


def base_interpreter(python: str) -> str:
    """The interpreter a venv's python runs (executors use it with the packed packages on their PYTHONPATH)."""
    import sys

    if Path(python) == Path(sys.executable):
        return getattr(sys, "_base_executable", sys.executable)
    cfg = Path(python).parent.parent / "pyvenv.cfg"
    if cfg.is_file():
        values = {key.strip(): value.strip() for key, _, value in
                  (line.partition("=") for line in cfg.read_text().splitlines())}
        candidate = Path(values.get("home", "")) / Path(python).name
        if values.get("home") and candidate.exists():
            return str(candidate)
    return python


def spark_conf(settings: Settings, app_name: str, extra: dict[str, str] | None = None,
               defaults: dict[str, str] | None = None) -> dict[str, str]:
    """All Spark settings as a plain dict (testable without a JVM). `defaults` are a caller's own defaults (the
    operator's LAKELINE_SPARK_CONF wins over them); `extra` wins over everything."""
    jars = spark_jars(settings)
    conf: dict[str, str] = {
        "spark.app.name": app_name,
        "spark.master": settings.spark_master,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,"
                                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        # A JSON object with a repeated key must not fail the whole batch (poison pill); the last value wins.
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        "spark.sql.shuffle.partitions": "4",
        # Timestamps as Parquet INT64 microseconds (what delta-rs and Iceberg write), not Spark's legacy INT96:
        # three timestamp columns a row as INT96 were 6 % of a Delta write's task time (Julian-day bytes through a
        # binary dictionary), bench/results/drain-profile-2026-11-28.md. Every reader Lakeline serves reads both.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.ui.enabled": "false",
        "spark.sql.debug.maxToStringFields": "500",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.sql.streaming.stopGracefullyOnShutdown": "false",
        # Delta: keep commitInfo user metadata per write; never auto-optimize inside the stream.
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Delta 4 ignores VACUUM's RETAIN (anything but 0) by default and applies the table's
        # delta.deletedFileRetentionDuration instead: a longer window asked for by `lakeline retain` would silently
        # become the shorter table default. Honour it; the safety check still refuses one below the table's.
        "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled": "false",
        # Delta on S3: put-if-absent commits (the stock S3SingleDriverLogStore is safe for one driver only).
        "spark.delta.logStore.s3a.impl": DELTA_S3_LOGSTORE,
        "spark.delta.logStore.s3.impl": DELTA_S3_LOGSTORE,
        "spark.hadoop.fs.s3a.create.conditional.enabled": "true",
        "spark.sql.streaming.checkpointFileManagerClass": S3_CHECKPOINT_FILE_MANAGER,
        # S3A
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": str(settings.s3_path_style).lower(),
        "spark.hadoop.fs.s3a.endpoint.region": settings.aws_region,
        "spark.hadoop.fs.s3a.fast.upload": "true",
        "spark.hadoop.fs.s3a.committer.magic.enabled": "false",
        "spark.driver.extraJavaOptions": driver_logging(settings, app_name),
        "spark.pyspark.python": settings.python,
        "spark.pyspark.driver.python": settings.python,
    }
    # Under spark-submit (PYSPARK_GATEWAY_PORT set) the driver's JVM is already running: its classpath came from the
    # launcher (`--driver-class-path`, maintenance.tasks), and only the executors' can still be set here.
    under_submit = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    if settings.spark_master.startswith("local") and not under_submit:
        # In local mode the driver is the only JVM, so the jars go straight on its classpath. Through spark.jars
        # Spark would copy every one (about 700 MB, most of it the AWS SDK bundle) into a temp folder at each
        # start: 3-4 s of every start-up. (PYSPARK_GATEWAY_PORT set: spark-submit has already started the JVM.)
        conf["spark.driver.extraClassPath"] = os.pathsep.join(jars)
        conf["spark.driver.extraJavaOptions"] += _class_archive_options(settings, jars)
    elif settings.spark_jars_on_workers:
        # The workers have the jars at the same path (the local cluster, an image): no ~700 MB shipped to each
        # executor.
        conf["spark.executor.extraClassPath"] = os.pathsep.join(jars)
        if not under_submit:
            conf["spark.driver.extraClassPath"] = conf["spark.executor.extraClassPath"]
    else:
        conf["spark.jars"] = ",".join(jars)
    packages = executor_packages(settings)
    if packages is not None:
        # Executors run the base interpreter with the shipped packages (and the code zip build_spark adds) on their
        # PYTHONPATH: a worker's Python needs none of them installed.
        conf["spark.archives"] = f"{packages}#{EXECUTOR_PACKAGES_DIR}"
        conf["spark.executorEnv.PYTHONPATH"] = EXECUTOR_PACKAGES_DIR
        conf["spark.pyspark.python"] = base_interpreter(settings.python)
    if settings.spark_master.startswith("local"):
        # Delta rebuilds table state with a shuffle after each commit; its default 50 partitions cost ~2 s a
        # commit on a 2-core box. Clusters keep Delta's default.
        conf["spark.databricks.delta.snapshotPartitions"] = "2"
    if settings.s3_endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.s3_endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(settings.s3_endpoint.startswith("https")).lower()
    credentials = settings.aws_credentials()
    if "access_key_id" in credentials and "secret_access_key" in credentials:
        conf["spark.hadoop.fs.s3a.access.key"] = credentials["access_key_id"]
        conf["spark.hadoop.fs.s3a.secret.key"] = credentials["secret_access_key"]
        provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if "session_token" in credentials:
            conf["spark.hadoop.fs.s3a.session.token"] = credentials["session_token"]
            provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = provider
    if settings.iceberg_catalog_uri:
        prefix = f"spark.sql.catalog.{settings.iceberg_catalog_name}"
        if is_rest_catalog(settings.iceberg_catalog_uri):
            catalog = {f"{prefix}.lakeline.delegate-type": "rest", f"{prefix}.uri": settings.iceberg_catalog_uri}
            for key, value in settings.rest_catalog_auth().items():
                catalog[f"{prefix}.{key}"] = value
        else:
            catalog = {f"{prefix}.lakeline.delegate-type": "jdbc",
                       f"{prefix}.uri": jdbc_uri(settings.iceberg_catalog_uri),
                       # pyiceberg's SqlCatalog creates the V1 schema; Java would create V0 without this.
                       f"{prefix}.jdbc.schema-version": "V1"}
        conf.update({
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            # The JDBC or REST catalog, its tables committing through Lakeline's fence check (ingest.lease).
            f"{prefix}.catalog-impl": FENCING_CATALOG,
            **catalog,
            # One AWS SDK (S3A's) for both formats: Iceberg writes through Hadoop FileIO over s3a://.
            f"{prefix}.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
            # foreachBatch runs in a cloned session with its own catalog instance: without this, one session
            # keeps serving a table snapshot another has moved past.
            f"{prefix}.cache-enabled": "false",
        })
        if settings.warehouse:
            conf[f"{prefix}.warehouse"] = settings.warehouse
    conf.update(defaults or {})
    conf.update(settings.spark_conf)  # the operator's LAKELINE_SPARK_CONF wins over the defaults above
    conf.update(extra or {})
    return conf


def build_spark(settings: Settings, app_name: str = "lakeline", extra: dict[str, str] | None = None,
                defaults: dict[str, str] | None = None) -> "SparkSession":
    """A SparkSession for local[N] or a cluster master (LAKELINE_SPARK_MASTER), ready for Delta and Iceberg on S3."""
    conf = spark_conf(settings, app_name, extra, defaults)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", settings.python)
    if "spark.archives" in conf:
        # Python functions run PYSPARK_PYTHON: on the executors with the shipped packages, and on the driver (a
        # Python data source's planning) with the driver's own site-packages, handed to its JVM's children here.
        import sysconfig

        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
        site = sysconfig.get_paths()["purelib"]
        if site not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
    else:
        os.environ.setdefault("PYSPARK_PYTHON", settings.python)
    if settings.spark_master.startswith("local") or on_loopback(settings.spark_master):
        # The driver's RPC, block manager and UI ports then bind to loopback only (a local cluster's executors
        # reach it there).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    # py4j logs every callback at INFO; once anything (Airflow, for one) sets the root logger to INFO, that
    # drowns the pipeline's own progress lines.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if settings.library_logs == "quiet":
        _launch_quiet_gateway(conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    if "spark.archives" in conf:
        spark.sparkContext.addPyFile(str(_code_zip()))  # Lakeline's own code, as this driver has it
    return spark


def _code_zip() -> Path:
    """The `ingest` package as a zip for the executors' PYTHONPATH (a fresh temp file, made in well under 1 s)."""
    import tempfile
    import zipfile

    package = Path(__file__).resolve().parent
    target = Path(tempfile.mkdtemp(prefix="lakeline-code-")) / "lakeline_ingest.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for source in sorted(package.rglob("*.py")):
            archive.write(source, source.relative_to(package.parent).as_posix())
    return target


def on_loopback(master: str) -> bool:
    """Whether a `spark://host:port` master runs on this host's loopback (the local stack's cluster)."""
    from urllib.parse import urlsplit

    host = urlsplit(master).hostname if master.startswith("spark://") else None
    return host in ("localhost", "::1") or bool(host and host.startswith("127."))


def lakeline_class(spark: "SparkSession", name: str, use):
    """`use(cls)` on Lakeline's JVM class `name` (built into the Lakeline jar by infra/setup.sh); a ConfigError
    naming the fix when this Spark session's classpath lacks the jar."""
    from py4j.protocol import Py4JError

    try:
        return use(getattr(spark.sparkContext._jvm, name))  # noqa: SLF001 - py4j
    except (TypeError, Py4JError) as exc:  # a class py4j cannot find is a package, and not callable
        raise ConfigError(f"{name} could not be created ({exc}): the Lakeline jar is missing from this Spark "
                          f"session's classpath; run `bash infra/setup.sh`") from exc


def pass_jvm_sigterm_to_driver(spark: "SparkSession") -> bool:
    """Make a SIGTERM that reaches this session's JVM stop the Python driver instead of killing the JVM under it
    (a signal to the process group reaches both: Ctrl-C, `kill -TERM -<pgid>`, systemd, Airflow). PySpark already
    keeps SIGINT from the JVM. Only where this process started the JVM (not under spark-submit, where the JVM
    started Python). True when installed."""
    return int(lakeline_class(spark, STOP_SIGNAL, lambda cls: cls.passTo(os.getpid()))) == os.getpid()

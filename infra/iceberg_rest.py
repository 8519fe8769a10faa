"""The Iceberg project's REST catalog server (iceberg-open-api test fixtures, from Maven Central) as the local
stack's catalog: `lakeline dev up --iceberg-catalog rest`.

It runs in a JVM of its own on a free 127.0.0.1 port (infra/iceberg-rest: the fixture's adapter and servlet behind
a loopback-only listener), backed by a JDBC catalog in a SQLite file of the stack, writing table metadata to the
stack's S3 through Hadoop's S3A (core-site.xml in its own conf folder). Spark and pyiceberg both reach it at
http://127.0.0.1:<port>, the shape of Polaris', Glue's and Unity's REST endpoints.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from infra.procs import ComponentError, free_port, marked_env, wait_until

SERVER_CLASS = "org.apache.iceberg.rest.LakelineRestCatalogServer"
LAUNCHER_JAR = "lakeline-rest-launcher.jar"


@dataclass
class RestCatalogProcess:
    pid: int
    uri: str
    log: Path


def rest_healthy(uri: str) -> bool:
    """True when the server answers the REST spec's config endpoint."""
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _classpath(rest_jars: Path, spark_jars: Path) -> str:
    import pyspark

    if not (rest_jars / LAUNCHER_JAR).is_file():
        raise ComponentError(f"iceberg rest catalog: {rest_jars / LAUNCHER_JAR} is missing; run `bash infra/setup.sh`")
    hadoop = Path(pyspark.__file__).parent / "jars"
    s3a = [str(p) for p in spark_jars.glob("*.jar")
           if p.name.startswith(("hadoop-aws-", "bundle-", "commons-logging-", "analyticsaccelerator-s3-"))]
    if len(s3a) != 4:
        raise ComponentError(f"iceberg rest catalog: hadoop-aws, the AWS SDK bundle or their helpers are missing in "
                             f"{spark_jars}; run `bash infra/setup.sh`")
    client = [str(p) for p in hadoop.glob("hadoop-client-*.jar")]  # Hadoop's Configuration and FileSystem
    # Hadoop first: iceberg-core's test jar carries test doubles of some S3A classes that must not win.
    return ":".join([*client, *s3a, f"{rest_jars}/*"])


def _core_site(folder: Path, s3_endpoint: str, access_key: str, secret_key: str, region: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    values = {"fs.s3a.endpoint": s3_endpoint, "fs.s3a.path.style.access": "true",
              "fs.s3a.connection.ssl.enabled": str(s3_endpoint.startswith("https")).lower(),
              "fs.s3a.endpoint.region": region, "fs.s3a.access.key": access_key, "fs.s3a.secret.key": secret_key,
              "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    properties = "".join(f"<property><name>{k}</name><value>{escape(v)}</value></property>"
                         for k, v in values.items())
    target = folder / "core-site.xml"
    target.write_text(f'<?xml version="1.0"?><configuration>{properties}</configuration>\n')
    target.chmod(0o600)  # it holds the (local, moto) S3 keys


def start_rest_catalog(rest_jars: Path, spark_jars: Path, work: Path, warehouse: str, s3_endpoint: str,
                       access_key: str, secret_key: str, region: str, timeout: float = 90.0) -> RestCatalogProcess:
    """Start the REST catalog server for `warehouse` on a free loopback port and wait until it answers."""
    java = shutil.which("java")
    if java is None:
        raise ComponentError("iceberg rest catalog: `java` is not on PATH; install Java 17+")
    classpath = _classpath(rest_jars, spark_jars)
    conf = work / "rest-catalog-conf"
    _core_site(conf, s3_endpoint, access_key, secret_key, region)
    port, log = free_port(), work / "rest-catalog.log"
    env = marked_env(str(work))
    env.update({"CATALOG_URI": f"jdbc:sqlite:{work / 'rest_catalog.db'}", "CATALOG_WAREHOUSE": warehouse,
                "CATALOG_IO__IMPL": "org.apache.iceberg.hadoop.HadoopFileIO", "CATALOG_CATALOG_NAME": "lakeline"})
    with open(log, "w") as out:
        proc = subprocess.Popen([java, "-Xmx384m", "-cp", f"{conf}:{classpath}", SERVER_CLASS, "127.0.0.1", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    uri = f"http://127.0.0.1:{port}"
    wait_until(lambda: rest_healthy(uri), timeout, f"iceberg rest catalog on {uri}", alive=lambda: proc.poll() is None,
               log=log)
    return RestCatalogProcess(pid=proc.pid, uri=uri, log=log)

"""`lakeline sql-endpoint`: the SQL endpoint for BI tools in the foreground (HiveServer2/JDBC and Spark Connect over
the pipelines' tables); `lakeline dev up --sql-endpoint` runs the same command in the background."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from ingest.errors import ExitCode
from lakeline.output import output_arg, output_of

REPO_CONF = Path(__file__).resolve().parents[2] / "conf"


def register(sub) -> None:
    endpoint = sub.add_parser(
        "sql-endpoint", help="serve the pipelines' tables to BI tools: JDBC/ODBC (HiveServer2) and Spark Connect",
        description="Runs one Spark application serving Spark's Thrift server (the HiveServer2 protocol: beeline, "
                    "DBeaver, Superset, Tableau; jdbc:hive2://HOST:PORT/default) and Spark Connect (sc://HOST:PORT) "
                    "until SIGTERM or Ctrl-C, with both formats' catalogs and each pipeline's main and dead-letter "
                    "table as a view named like `lakeline query` names it (orders, orders_dead_letters). A table "
                    "that does not exist yet is registered once it does (every "
                    "LAKELINE_SQL_ENDPOINT_REFRESH_SECONDS). Listens on LAKELINE_SQL_ENDPOINT_HOST (default "
                    "127.0.0.1, no authentication); another address needs authentication on both protocols "
                    "(docs/sql-endpoint.md). On a cluster, point LAKELINE_SPARK_MASTER at it: the servers run in "
                    "this driver.")
    endpoint.add_argument("--pipeline", action="append", metavar="FILE|DIR",
                          help="pipeline YAML or a folder of them, repeatable (default: the pipelines/ folder of "
                               "LAKELINE_CONF_DIR, else the repo's conf/pipelines)")
    endpoint.add_argument("--host", help="listen address (default LAKELINE_SQL_ENDPOINT_HOST, 127.0.0.1)")
    endpoint.add_argument("--port", type=int, help="HiveServer2 port (default LAKELINE_SQL_ENDPOINT_PORT, 10000)")
    endpoint.add_argument("--connect-port", type=int,
                          help="Spark Connect port (default LAKELINE_SQL_ENDPOINT_CONNECT_PORT, 15002)")
    output_arg(endpoint)
    endpoint.set_defaults(run=run)


def run(args) -> ExitCode:
    from ingest.config import load_pipeline
    from ingest.settings import load_settings
    from ingest.sql_endpoint import serve
    from lakeline.commands import pipeline_files

    settings = load_settings()
    chosen = {"sql_endpoint_host": args.host, "sql_endpoint_port": args.port,
              "sql_endpoint_connect_port": args.connect_port}
    settings = settings.model_copy(update={key: value for key, value in chosen.items() if value is not None})
    default = Path(settings.conf_dir) / "pipelines" if settings.conf_dir else REPO_CONF / "pipelines"
    configs = [load_pipeline(path) for path in pipeline_files(args.pipeline or [str(default)])]
    out = output_of(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def ready(status) -> None:
        def text() -> str:
            waiting = "".join(f"\n  not there yet: {name}" for name in sorted(status.waiting))
            return (f"sql endpoint ready in {status.seconds_to_ready:.0f} s\n  JDBC (HiveServer2): {status.jdbc_url}\n"
                    f"  Spark Connect: {status.connect_url}\n  tables: {', '.join(status.names) or '(none yet)'}"
                    f"{waiting}\nstop with Ctrl-C or SIGTERM")
        out.result(status.to_json(), text)
        sys.stdout.flush()  # a log file (dev up) gets the ready lines now, not at exit

    serve(configs, settings, stop, ready)
    return ExitCode.OK

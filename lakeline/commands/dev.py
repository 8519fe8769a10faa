"""`lakeline dev up|down|status`: the embedded local stack; `lakeline dev class-archive`: the JVM class archive
local Spark drivers start from."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ingest.errors import ExitCode
from lakeline.commands import actions


def register(sub) -> None:
    dev = sub.add_parser("dev", help="the embedded local stack: Kafka broker, moto S3/Kinesis, Iceberg catalog",
                         description="Start, stop or inspect the local stack. `up` starts a KRaft Kafka broker and "
                                     "a moto server (S3 + Kinesis) on free 127.0.0.1 ports, creates the warehouse "
                                     "bucket and the SQLite Iceberg catalog, and writes the endpoints to "
                                     ".lakeline/stack/stack.env, where every other command finds them. With "
                                     "--spark-workers N it also starts a Spark standalone master and N workers "
                                     "and points LAKELINE_SPARK_MASTER at them. Running `up` twice reuses the "
                                     "running stack. `down` stops only what `up` started. `class-archive` makes "
                                     "the JVM class archive (AppCDS) that local Spark drivers start from, about 5 "
                                     "s faster, by running the demo with a few thousand events on a temporary "
                                     "stack of its own (about a minute, once per JDK and set of jars; "
                                     "infra/setup.sh runs it; LAKELINE_CLASS_ARCHIVE=off turns it off).")
    dev.set_defaults(run=run)
    sub_actions = actions(dev)
    up = sub_actions.add_parser("up", help="start what is not running, health-check it, write stack.env")
    down = sub_actions.add_parser("down", help="stop what `up` started")
    status = sub_actions.add_parser("status", help="the stack's processes and endpoints, as JSON")
    archive = sub_actions.add_parser("class-archive", help="make the JVM class archive local drivers start from")
    up.add_argument("--spark-workers", type=int, default=0, metavar="N",
                    help="also start a Spark standalone master and N workers from the pyspark distribution "
                         "(loopback only), and point LAKELINE_SPARK_MASTER at it in stack.env (default 0: Spark "
                         "runs local[N] inside each driver)")
    up.add_argument("--spark-worker-cores", type=int, default=1, metavar="C", help="cores per worker (default 1)")
    up.add_argument("--spark-worker-memory", default="2g", metavar="M",
                    help="memory per worker for its executors, e.g. 2g (default)")
    up.add_argument("--iceberg-catalog", choices=["sql", "rest"], default="sql",
                    help="the Iceberg catalog Spark and pyiceberg share: sql (default, a SQLite file) or rest "
                         "(the Iceberg project's REST catalog server on a free 127.0.0.1 port, backed by SQLite)")
    up.add_argument("--kafka-security", choices=["sasl_ssl", "mtls"], default=None,
                    help="the broker's only client listener is TLS (a CA and keys made with keytool in the "
                         "state folder), with SASL/SCRAM-SHA-512 users (sasl_ssl) or client certificates (mtls); "
                         "the client settings, secrets included, go to stack.env (mode 0600) only")
    up.add_argument("--sql-endpoint", action="store_true",
                    help="also start the SQL endpoint for BI tools (`lakeline sql-endpoint` in the background: "
                         "HiveServer2/JDBC and Spark Connect on free 127.0.0.1 ports, written to stack.env; 1 to "
                         "1.5 GB of memory); `dev status` shows its URLs, `dev down` stops it")
    archive.add_argument("--force", action="store_true", help="make it again even if it is up to date")
    for action in (up, down, status):
        action.add_argument("--state-dir", type=Path, help="state folder (default .lakeline in the repo, or "
                                                           "LAKELINE_STATE_DIR)")


def run(args) -> ExitCode:
    from infra import stack
    from infra.procs import ComponentError

    if args.action == "class-archive":
        from lakeline.class_archive import build_class_archive

        archive, outcome = build_class_archive(force=args.force)
        print(f"class archive: {archive} ({outcome})")
        return ExitCode.OK
    try:
        if args.action == "up":
            if args.spark_workers < 0 or args.spark_worker_cores < 1:
                print("lakeline dev up: --spark-workers must be 0 or more and --spark-worker-cores 1 or more",
                      file=sys.stderr)
                return ExitCode.USAGE
            stack.up(args.state_dir, spark_workers=args.spark_workers, worker_cores=args.spark_worker_cores,
                     worker_memory=args.spark_worker_memory, iceberg_catalog=args.iceberg_catalog,
                     kafka_security_mode=args.kafka_security or "", sql_endpoint=args.sql_endpoint)
        elif args.action == "down":
            stack.down(args.state_dir)
        else:
            print(json.dumps(stack.status(args.state_dir), indent=2))
    except ComponentError as exc:
        print(f"lakeline dev {args.action}: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK

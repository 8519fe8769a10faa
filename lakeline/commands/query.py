"""The analyst's commands, Spark-free: `query` (SQL over the pipelines' tables, one statement or a prompt) and
`tables` (every table with its freshness)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from ingest.errors import ConfigError, ExitCode, LakelineError
from lakeline.output import output_of

HISTORY_FILE = Path.home() / ".lakeline_query_history"


def _pipelines_args(parser) -> None:
    parser.add_argument("--pipeline", action="append", metavar="FILE|DIR",
                        help="pipeline YAML or a folder of them (repeatable); default: every pipeline in "
                             "CONF_DIR/pipelines")
    parser.add_argument("--conf-dir", default="conf", metavar="DIR", help="configuration folder (default conf)")


def register(sub) -> None:
    query = sub.add_parser(
        "query", help="SQL over the pipelines' tables, without Spark (DuckDB); no SQL: a prompt",
        description="Runs SQL in DuckDB over every main and dead-letter table of the pipelines, each under its "
                    "analyst name (the table's name, e.g. orders and orders_dead_letters; the pipeline's name when "
                    "two pipelines share a table name), read with delta-rs or pyiceberg. Only the tables a statement "
                    "reads are opened. lakeline_freshness is a table of every table's freshness. Without SQL, an "
                    "interactive prompt (history, .tables, .freshness, .quit).")
    query.add_argument("sql", nargs="?", metavar="SQL", help="one statement; none: the interactive prompt")
    _pipelines_args(query)
    query.add_argument("--output", choices=["text", "json", "csv"], default="text",
                       help="text for a person (default), a JSON array of row objects, or CSV")
    query.add_argument("--to", metavar="FILE.parquet|FILE.csv",
                       help="write the rows to a file instead (Parquet keeps nested types)")
    query.add_argument("--as-of", metavar="VERSION|SNAPSHOT|TIME",
                       help="read the tables as they were: a Delta version or Iceberg snapshot id (one table), or "
                            "an ISO-8601 time")
    query.add_argument("--since", metavar="VERSION|SNAPSHOT",
                       help="incremental read: only the rows appended after this version or snapshot (one table)")
    query.add_argument("--freshness", action="store_true",
                       help="after the answer, one freshness line per table the statement read (on stderr)")
    query.add_argument("--stats", action="store_true",
                       help="after the answer, the data files each table's scan opened of those it holds "
                            "(on stderr): filters on partition and source columns skip files")
    query.add_argument("--explain", action="store_true",
                       help="print DuckDB's plan instead of running the statement (pushed filters show under "
                            "each ARROW_SCAN)")
    query.set_defaults(run=run_query)

    tables = sub.add_parser(
        "tables", help="every table of the pipelines: newest commit, positions, waiting records, counts, SLA",
        description="One row per main and dead-letter table: its newest commit time, the source positions it is "
                    "complete through, the records still waiting in the source, row and file counts (from "
                    "metadata) and the pipeline's freshness SLA state. Spark-free. A table not created yet is a "
                    "row saying so. Exit 0 whatever the SLA states (`lakeline freshness` gates on them).")
    _pipelines_args(tables)
    tables.add_argument("--output", choices=["text", "json"], default="text",
                        help="text for a person (default) or one JSON document on stdout")
    tables.add_argument("--history", metavar="TABLE",
                        help="instead, the versions/snapshots TABLE keeps, with their commit times (the ids "
                             "--as-of and --since take)")
    tables.set_defaults(run=run_tables)


def pipelines(args) -> list[tuple]:
    """(config, file) of every pipeline --pipeline names, or of every YAML in CONF_DIR/pipelines."""
    from ingest.config import load_pipeline
    from lakeline.commands import pipeline_files

    if args.pipeline:
        files = pipeline_files(args.pipeline)
    else:
        folder = Path(args.conf_dir) / "pipelines"
        files = sorted(folder.glob("*.yaml"))
        if not files:
            raise ConfigError(f"--conf-dir {args.conf_dir}: no pipeline YAMLs in {folder}; give --pipeline FILE|DIR")
    return [(load_pipeline(f), str(f)) for f in files]


def session_of(args):
    from ingest.formats.table_reader import parse_as_of
    from ingest.settings import load_settings
    from lakeline.analyst import Session

    as_of = parse_as_of(args.as_of) if getattr(args, "as_of", None) else None
    since = parse_as_of(args.since) if getattr(args, "since", None) else None
    if since is not None and not isinstance(since, int):
        raise ConfigError(f"--since {args.since}: give a version or snapshot id (a time is for --as-of)")
    if as_of is not None and since is not None:
        raise ConfigError("--as-of and --since: give one (--since reads up to the current state)")
    return Session(pipelines(args), load_settings(), as_of, since, count_files=getattr(args, "stats", False))


def run_query(args) -> ExitCode:
    session = session_of(args)
    try:
        if args.sql is None:
            return prompt(session, args.output)
        answer(session, args.sql, args)
        return ExitCode.OK
    finally:
        session.close()


def answer(session, sql: str, args) -> None:
    """One statement: its plan, its rows to a file, or its rows on stdout; then --freshness and --stats lines."""
    from lakeline import analyst

    if args.explain:
        print(session.explain(sql))
        return
    if args.to:
        count = session.extract(sql, args.to)
        print(f"{count:,} rows written to {args.to}", file=sys.stderr)
    else:
        result = session.execute(sql)
        if args.output == "json":
            print(analyst.render_json(result))
        elif args.output == "csv":
            sys.stdout.write(analyst.render_csv(result))
        else:
            from lakeline.output import stdout_console

            stdout_console().print(analyst.render_text(result))
    if args.stats:
        for name, (opened, total) in session.files_opened().items():
            print(f"{name}: scanned {opened} of {total} data files", file=sys.stderr)
    if args.freshness:
        from maintenance.table_status import freshness_line

        now = datetime.now(UTC)
        for status in session.statuses(list(session.scanned)):
            print(freshness_line(status, now), file=sys.stderr)


def prompt(session, output: str) -> ExitCode:
    """The interactive prompt: a statement ends with `;`; errors are printed and the prompt stays."""
    # The stdlib's readline gives line editing and a history file; prompt_toolkit is not in the environment.
    import readline

    from lakeline import analyst
    from maintenance.table_status import freshness_line

    try:
        readline.read_history_file(HISTORY_FILE)
    except OSError:
        pass  # no history yet
    print(f"lakeline query: {', '.join(session.names)} and {analyst.FRESHNESS_TABLE}. End a statement with ';'. "
          ".tables, .freshness, .quit")
    args = _PromptArgs(output)
    pending: list[str] = []
    try:
        while True:
            try:
                line = input("...> " if pending else "lakeline> ")
            except EOFError:
                print()
                break
            stripped = line.strip()
            if not pending and stripped.startswith("."):
                if stripped in (".quit", ".exit"):
                    break
                if stripped == ".tables":
                    for name, (config, table) in session.names.items():
                        print(f"{name}  ({config.sink.format}, pipeline {config.pipeline}, "
                              f"{'main' if table == config.sink.table else 'dead letters'})")
                elif stripped == ".freshness":
                    now = datetime.now(UTC)
                    for status in session.statuses():
                        print(freshness_line(status, now))
                else:
                    print(f"error: unknown command {stripped}; .tables, .freshness, .quit")
                continue
            if not stripped:
                continue
            pending.append(line)
            if not stripped.endswith(";"):
                continue
            sql, pending = "\n".join(pending).strip().rstrip(";"), []
            try:
                answer(session, sql, args)
            except LakelineError as exc:
                print(f"error: {exc}")
    finally:
        try:
            readline.write_history_file(HISTORY_FILE)
        except OSError:
            pass  # a read-only home: the session still ran
    return ExitCode.OK


class _PromptArgs:
    """The prompt's statements answer as `lakeline query SQL --output OUTPUT` would."""

    def __init__(self, output: str):
        self.output, self.to, self.explain, self.stats, self.freshness = output, None, False, False, False


def run_tables(args) -> ExitCode:
    from lakeline import analyst

    session = session_of(args)
    try:
        out = output_of(args)
        if args.history:
            name = session.resolve(args.history)
            versions = session.reader(name).versions()
            out.result([v.to_json() for v in versions], lambda: analyst.render_history(name, versions))
            return ExitCode.OK
        statuses = session.statuses()
        out.result([s.to_json() for s in statuses], lambda: analyst.render_statuses(statuses))
        return ExitCode.OK
    finally:
        session.close()

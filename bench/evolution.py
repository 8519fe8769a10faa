"""Evolution: the first commit of a topic whose records add N new nested fields (add mode), Delta and Iceberg, on
the embedded stack. Prints a table and writes bench/results/evolution-<date>.{json,md}.

    .venv/bin/python -m bench.evolution --fields 10 100 500

Each case is a new topic and pipeline (declared: `event_type`, `delivery` and `ctx: struct<id: string>`,
`schema.evolution: add`) drained with trigger available-now in one Spark session: `wide-N` is --records records of
`ingest.corpus.wide_events(N)` (the same N new fields `ctx.f<i>` in every record: N schema changes); `events` is
the `events` corpus (`ingest.corpus.heterogeneous`: sixty event types, hundreds of nested fields, a type
conflict), with `infer_timestamps`. Reported per
case: `first_batch_s`, the first batch's foreachBatch seconds (decode, the evolution, the dead-letter and table
commits: from the batch's start to its commit being visible), its `scan_s` phase (decode and evolution), the run's
wall seconds, the schema commits the evolution made (Delta: ADD COLUMNS versions; Iceberg: new schemas), the
fields added, the rows and dead letters (reconciled: the run fails, exit 3, when a case is not exact).

To measure another revision (e.g. main before one-commit evolution), run this file with PYTHONPATH at a checkout of
it that has this module and ingest/corpus.py copied in.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import document, write
from ingest.formats import FORMAT_NAMES

DECLARED = {"fields": [{"name": "event_type", "type": "string", "required": True},
                       {"name": "delivery", "type": "string", "required": True},
                       {"name": "ctx", "type": "struct<id: string>"}], "evolution": "add"}


def _leaves(data_type) -> int:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return sum(_leaves(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _leaves(data_type.elementType)
    if isinstance(data_type, MapType):
        return _leaves(data_type.valueType)
    return 1


def schema_commits(table, fmt: str) -> int:
    """The table's commits that changed its schema after its creation."""
    if fmt == "delta":
        history = table.spark.sql(f"DESCRIBE HISTORY {table.sql_name}").collect()
        return sum(1 for row in history if row["operation"] in ("ADD COLUMNS", "CHANGE COLUMN"))
    java = table.java_table()
    java.refresh()
    return java.schemas().size() - 1


def run_case(spark, settings, fmt: str, case: str, records: int, workdir: Path,
             on_type_conflict: str = "rescue") -> dict:
    from ingest.config import PipelineConfig
    from ingest.corpus import heterogeneous, wide_events
    from ingest.events import BatchCommitted, Events, Recorder
    from ingest.formats import tables_for
    from ingest.pipeline import Pipeline
    from ingest.produce import produce
    from ingest.reconcile import reconcile

    name = f"bench_evolve_{fmt}_{case.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    schema = {**DECLARED, "infer_timestamps": True} if case == "events" else dict(DECLARED)
    if on_type_conflict != "rescue":  # the key is left out by default, so an older revision reads the same YAML
        schema["on_type_conflict"] = on_type_conflict
    config = PipelineConfig.model_validate({
        "pipeline": name, "schema": schema,
        "source": {"kind": "kafka", "topics": [name], "starting_offsets": "earliest",
                   "max_offsets_per_trigger": 250_000},
        "sink": {"format": fmt, "table": name, "namespace": "bench"}})
    # As a file (the headers do not matter here), so that an older revision's `produce` sends the same records.
    payloads = ([p for _, _, p in heterogeneous(records, seed=33)] if case == "events"
                else [p for _, p in wide_events(int(case.split("-")[1]), records, seed=33)])
    lines = workdir / f"{name}.jsonl"
    lines.write_bytes(b"".join(p + b"\n" for p in payloads))
    produce(config, settings, 0, partitions=2, from_file=lines)
    recorder = Recorder()
    began = time.perf_counter()
    Pipeline(config, settings, spark=spark, trigger="available-now", events=Events(recorder)).run(
        install_signal_handlers=False)
    wall = time.perf_counter() - began
    first = next(e for e in recorder.events if isinstance(e, BatchCommitted))
    report = reconcile(config, settings, spark)
    table = tables_for(spark, config, settings)[0]
    added = sum(_leaves(f.dataType) for f in table.table_schema().fields
                if f.name not in {"event_type", "delivery"} and not f.name.startswith("_")) - 1  # ctx.id
    return {"format": fmt, "case": case, "records": records, "fields_added": added,
            "first_batch_s": round(first.seconds, 2), "scan_s": round(first.phases.get("scan", 0.0), 2),
            "run_s": round(wall, 2), "schema_commits": schema_commits(table, fmt), "rows": report.rows,
            "dead_letters": report.dead_letters, "dead_letter_reasons": report.dead_letters_by_reason,
            "rescued_conflicts": _rescued_conflicts(recorder.events), "on_type_conflict": on_type_conflict,
            "exact": report.exact}


def _rescued_conflicts(events) -> dict[str, int]:
    """Rows per field whose value was rescued as a type conflict, over the run's batches."""
    totals: dict[str, int] = {}
    for event in events:
        for path, rows in getattr(event, "rescued_conflicts", {}).items():
            totals[path] = totals.get(path, 0) + rows
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.evolution", description=__doc__.splitlines()[0])
    parser.add_argument("--fields", type=int, nargs="*", default=[10, 100, 500], help="N of the wide-N cases")
    parser.add_argument("--records", type=int, default=329, help="records per case (default 329)")
    parser.add_argument("--no-events", action="store_true", help="leave out the `events` corpus case")
    parser.add_argument("--formats", nargs="+", choices=FORMAT_NAMES, default=list(FORMAT_NAMES))
    parser.add_argument("--label", default="", help="what code was measured (e.g. `main 853dacd`), in the results")
    parser.add_argument("--on-type-conflict", choices=["rescue", "dead_letter"], default="rescue",
                        help="schema.on_type_conflict of every case (dead_letter: the behaviour before rescue)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    args = parser.parse_args(argv)

    from infra import stack
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    stack.up()
    settings = load_settings()
    spark = build_spark(settings, "lakeline-bench-evolution")
    cases = [f"wide-{n}" for n in args.fields] + ([] if args.no_events else ["events"])
    workdir = Path(tempfile.mkdtemp(prefix="lakeline-bench-evolution-"))
    results = []
    try:
        for fmt in args.formats:
            for case in cases:
                row = run_case(spark, settings, fmt, case, args.records, workdir, args.on_type_conflict)
                print(json.dumps(row), flush=True)
                results.append(row)
    finally:
        spark.stop()
    table = ["| format | case | fields added | first batch | of it decode+evolve | run | schema commits | rows | "
             "dead letters | exact |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        table.append(f"| {r['format']} | {r['case']} | {r['fields_added']} | {r['first_batch_s']:.2f} s | "
                     f"{r['scan_s']:.2f} s | {r['run_s']:.2f} s | {r['schema_commits']} | {r['rows']} | "
                     f"{r['dead_letters']} | {r['exact']} |")
    print("\n".join(table))
    if not args.no_write:
        doc = document("evolution", argv, results, records=args.records, label=args.label)
        write(doc, "Evolution: the first commit of a topic adding N nested fields", "\n".join(table))
    return 0 if all(r["exact"] for r in results) else 3


if __name__ == "__main__":
    from lakeline.logs import configure

    configure()
    raise SystemExit(main())

"""The main job end to end on the embedded defaults (`lakeline demo`): stack up, produce, ingest into Delta and
Iceberg in micro-batches (as a stream would, leaving small files), compact both tables by their policies in
conf/tables/, then reconcile both and print a report."""

from __future__ import annotations

import time
from pathlib import Path

from infra.paths import REPO_ROOT
from ingest.errors import ExitCode

PIPELINES = (REPO_ROOT / "conf" / "pipelines" / "orders_delta.yaml",
             REPO_ROOT / "conf" / "pipelines" / "orders_iceberg.yaml")
TABLES = ("orders_delta", "orders_iceberg")  # conf/tables/<name>.yaml
DEMO_BATCH = 10_000  # records per micro-batch, so the demo leaves the small files a stream would


def run_demo(count: int, bad_ratio: float, stop_stack: bool = False,
             pipelines: tuple[Path, ...] = PIPELINES) -> ExitCode:
    from infra import stack
    from ingest.config import load_pipeline
    from ingest.pipeline import Pipeline
    from ingest.lease import pipeline_lease
    from ingest.ownership import drive
    from ingest.produce import produce
    from ingest.reconcile import reconcile
    from lakeline.output import stdout_console
    from lakeline.render import reconcile as render_reconcile
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    from datetime import datetime, UTC

    from maintenance.compaction import compact
    from maintenance.policy import load_table

    started = time.monotonic()
    print("== 1/5 local stack")
    stack.up()
    settings = load_settings()
    configs = [load_pipeline(p) for p in pipelines]
    print(f"== 2/5 produce {count:,} events ({bad_ratio:.1%} bad) to topic {configs[0].source.topics[0]}")
    produced = produce(configs[0], settings, count, bad_ratio=bad_ratio, seed=42)
    print(f"   {produced.count:,} events in {produced.seconds:.1f}s; bad by kind: {produced.bad}")
    spark = build_spark(settings, "lakeline-demo")
    timings = {}
    for config in configs:
        print(f"== 3/5 ingest {config.pipeline} ({config.sink.format}), available-now, {DEMO_BATCH:,} per batch")
        t0 = time.monotonic()
        batched = config.model_copy(update={"source": config.source.model_copy(
            update={"max_offsets_per_trigger": DEMO_BATCH})})
        # As `lakeline ingest` runs it: under the host lock and the pipeline's lease, the tables fenced.
        lease = pipeline_lease(batched.pipeline, batched.checkpoint_location(settings), settings)
        pipeline = Pipeline(batched, settings, spark=spark, trigger="available-now", lease=lease)
        with drive(pipeline) as driving:
            if driving:
                pipeline.run()
        timings[config.pipeline] = time.monotonic() - t0
    for name in TABLES:
        print(f"== 4/5 compact {name} (policy conf/tables/{name}.yaml; the demo includes the hot partition)")
        result = compact(spark, load_table(name, REPO_ROOT / "conf"), settings, datetime.now(UTC),
                         include_hot=True)
        print(f"   {result.summary()}")
    print("== 5/5 reconcile (after compaction)")
    exact = True
    for config in configs:
        report = reconcile(config, settings, spark)
        exact &= report.exact
        stdout_console().print(render_reconcile(report))
        print(f"  ingest took {timings[config.pipeline]:.1f}s "
              f"({(report.rows + report.dead_letters) / max(timings[config.pipeline], 1e-9):,.0f} records/s)")
    spark.stop()
    if stop_stack:
        stack.down()
    print(f"demo finished in {time.monotonic() - started:.0f}s: {'all exact' if exact else 'NOT EXACT'}")
    return ExitCode.OK if exact else ExitCode.NOT_EXACT

"""The main job end to end on the embedded defaults (`lakeline demo`): stack up, produce, ingest into Delta and
Iceberg, reconcile both, print a report."""

from __future__ import annotations

import time
from pathlib import Path

from infra.paths import REPO_ROOT

PIPELINES = (REPO_ROOT / "conf" / "pipelines" / "orders_delta.yaml",
             REPO_ROOT / "conf" / "pipelines" / "orders_iceberg.yaml")


def run_demo(count: int, bad_ratio: float, stop_stack: bool = False, pipelines: tuple[Path, ...] = PIPELINES) -> int:
    from infra import stack
    from ingest.config import load_pipeline
    from ingest.pipeline import Pipeline
    from ingest.produce import produce
    from ingest.reconcile import format_report, reconcile
    from ingest.settings import load_settings
    from ingest.spark import build_spark

    started = time.monotonic()
    print("== 1/4 local stack")
    stack.up()
    settings = load_settings()
    configs = [load_pipeline(p) for p in pipelines]
    print(f"== 2/4 produce {count:,} events ({bad_ratio:.1%} bad) to topic {configs[0].source.topics[0]}")
    produced = produce(configs[0], settings, count, bad_ratio=bad_ratio, seed=42)
    print(f"   {produced.count:,} events in {produced.seconds:.1f}s; bad by kind: {produced.bad}")
    spark = build_spark(settings, "lakeline-demo")
    timings = {}
    for config in configs:
        print(f"== 3/4 ingest {config.pipeline} ({config.sink.format}), available-now")
        t0 = time.monotonic()
        Pipeline(config, settings, spark=spark, trigger="available-now").run()
        timings[config.pipeline] = time.monotonic() - t0
    print("== 4/4 reconcile")
    exact = True
    for config in configs:
        report = reconcile(config, settings, spark)
        exact &= report.exact
        print(format_report(report))
        print(f"  ingest took {timings[config.pipeline]:.1f}s "
              f"({(report.rows + report.dead_letters) / max(timings[config.pipeline], 1e-9):,.0f} records/s)")
    spark.stop()
    if stop_stack:
        stack.down()
    print(f"demo finished in {time.monotonic() - started:.0f}s: {'all exact' if exact else 'NOT EXACT'}")
    return 0 if exact else 3

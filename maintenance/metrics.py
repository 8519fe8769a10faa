"""What maintenance commands report to Prometheus: the figures of each result (pure), and `report`, which sends
them where the settings say (ingest.metrics.push_maintenance: a Pushgateway, or node_exporter's textfile folder).

Every gauge is `lakeline_<command>_<figure>`, labelled by table (or pipeline and scenario), plus
`lakeline_<command>_last_run_timestamp_seconds`. A failed push is a warning: the maintenance itself succeeded.
ingest.metrics (prometheus_client) is imported only by `report`: the figures need none of it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ingest.settings import mask_url

if TYPE_CHECKING:
    from ingest.settings import Settings
    from maintenance.compaction import CompactionResult
    from maintenance.drill import DrillReport
    from maintenance.freshness import FreshnessReport
    from maintenance.retention import RetentionResult

log = logging.getLogger(__name__)

HELP = {
    "files_compacted": "Data files replaced by compaction in the last run",
    "files_written": "Data files compaction wrote in the last run",
    "files_now": "Data files in the partitions compaction chose, counted after the last run (the stream's new "
                 "files included)",
    "bytes_rewritten": "Bytes compaction rewrote in the last run",
    "partitions_compacted": "Partitions compacted in the last run",
    "partitions_failed": "Partitions whose compaction failed in the last run",
    "files_deleted": "Files retention deleted in the last run (0 in a dry run)",
    "files_deletable": "Files retention found past the retention period (deleted unless a dry run)",
    "orphan_files": "Orphan files retention found in the last run",
    "snapshots_expired": "Snapshots retention expired in the last run (Iceberg)",
    "seconds": "Duration of the last run",
    "passed": "1 when the drill scenario passed, else 0",
    "recovery_seconds": "Seconds from the injected fault to the restarted driver's first commit",
    "duplicates": "Duplicate records reconcile found after the drill scenario",
    "missing": "Missing records reconcile found after the drill scenario",
    "breached": "1 when the pipeline's freshness SLA is breached, else 0",
    "staleness_seconds": "Age of the table's newest commit when records are waiting",
    "lag_records": "Records waiting in the source past the table's end",
}


def compaction_figures(result: "CompactionResult") -> dict[str, float]:
    done = [p for p in result.partitions if p.status == "compacted"]
    figures = {"files_compacted": result.files_rewritten, "files_written": result.files_written,
               "bytes_rewritten": result.bytes_rewritten, "partitions_compacted": len(done),
               "partitions_failed": sum(p.status == "failed" for p in result.partitions), "seconds": result.seconds}
    now = [p.files_now for p in result.partitions]
    if now and None not in now:
        figures["files_now"] = sum(now)
    return figures


def retention_figures(result: "RetentionResult") -> dict[str, float]:
    figures = {"files_deleted": 0 if result.dry_run else len(result.files_deleted),
               "files_deletable": len(result.files_deleted), "orphan_files": len(result.orphan_files),
               "seconds": result.seconds}
    if result.snapshots_expired is not None:
        figures["snapshots_expired"] = result.snapshots_expired
    return figures


def drill_figures(report: "DrillReport") -> dict[str, dict[str, float]]:
    """Per scenario: passed, recovery seconds (-1 when there was no recovery to time), duplicates, missing."""
    return {s.scenario: {"passed": int(s.passed), "recovery_seconds": -1 if s.recovery_seconds is None
                         else s.recovery_seconds, "duplicates": s.duplicates, "missing": s.missing,
                         "seconds": s.seconds} for s in report.scenarios}


def freshness_figures(report: "FreshnessReport") -> dict[str, float]:
    figures = {"breached": int(not report.ok), "lag_records": report.lag_records}
    if report.staleness_seconds is not None:
        figures["staleness_seconds"] = report.staleness_seconds
    return figures


def report(settings: "Settings", command: str, labels: dict[str, str], figures: dict[str, float]) -> str | None:
    """Send one run's figures where the settings say; returns where they went (None: not configured, or the push
    failed, which is logged as a warning naming the target)."""
    from ingest.metrics import push_maintenance

    target = settings.pushgateway_url or settings.metrics_textfile_dir
    if not target:
        return None
    try:
        return push_maintenance(command, labels, figures, HELP, gateway=settings.pushgateway_url,
                                textfile_dir=settings.metrics_textfile_dir)
    except OSError as exc:  # URLError is an OSError: the gateway is down or refused the push
        log.warning(f"metrics of {command} {labels} not reported to {mask_url(target)}: {exc}")
        return None

"""Spark's per-batch progress joined with the batch's own report into one run event per batch (`BatchCommitted` or
`BatchReplayed`), on Spark's listener thread."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.batch import BatchReport
    from ingest.events import Events

# Spark's own phases of a micro-batch (StreamingQueryProgress.durationMs), in the order they run: ask the source
# for its newest offsets, write offsets/N, plan, run foreachBatch (Lakeline's batch), write commits/N. The trigger
# time less the foreachBatch time is Spark's fixed cost per batch.
_SPARK_PHASES = (("triggerExecution", "trigger"), ("latestOffset", "offsets"), ("walCommit", "wal"),
                 ("queryPlanning", "plan"), ("addBatch", "batch"), ("commitOffsets", "commit"))


def spark_phases(progress) -> dict[str, float]:
    """Seconds per Spark phase of the batch (empty when Spark did not time the trigger)."""
    durations = dict(progress.durationMs or {})
    if "triggerExecution" not in durations:
        return {}
    return {short: durations[key] / 1000 for key, short in _SPARK_PHASES if key in durations}


def lag(progress) -> int | None:
    """Records between the batch's end offsets and the source's newest ones (None when Spark does not say)."""
    try:
        total = 0
        for source in progress.sources:
            end = json.loads(source.endOffset) if isinstance(source.endOffset, str) else source.endOffset
            latest = json.loads(source.latestOffset) if isinstance(source.latestOffset, str) else source.latestOffset
            for topic, parts in (latest or {}).items():
                for part, offset in parts.items():
                    total += max(0, int(offset) - int(end.get(topic, {}).get(part, offset)))
        return total
    except (TypeError, ValueError, AttributeError):
        return None


def progress_listener(query_name: str, pipeline: str, reports: "dict[int, BatchReport]", events: "Events",
                      reported: Callable[[int], None]):
    """A StreamingQueryListener that emits one event per batch of `query_name` whose report is in `reports`,
    then calls `reported(batch_id)`."""
    from pyspark.sql.streaming import StreamingQueryListener

    from ingest.events import BatchCommitted, BatchReplayed

    class ProgressEvents(StreamingQueryListener):
        def onQueryStarted(self, event):  # noqa: N802 - Spark's API
            pass

        def onQueryIdle(self, event):  # noqa: N802
            pass

        def onQueryTerminated(self, event):  # noqa: N802
            pass

        def onQueryProgress(self, event):  # noqa: N802
            progress = event.progress
            if progress.name != query_name:
                return
            report = reports.get(progress.batchId)
            if report is None:
                return
            common = {"pipeline": pipeline, "batch_id": progress.batchId, "input_rows": progress.numInputRows,
                      "seconds": report.seconds, "lag": lag(progress), "spark_phases": spark_phases(progress)}
            if report.replayed:
                events.emit(BatchReplayed(**common))
            else:
                events.emit(BatchCommitted(rows=report.rows, dead_letters=report.dead_letters,
                                           phases=dict(report.phases), end=report.end_json,
                                           dead_letter_reasons=dict(report.dead_letter_reasons),
                                           routed=dict(report.routed),
                                           rescued_conflicts=dict(report.rescued_conflicts), **common))
            reported(progress.batchId)

    return ProgressEvents()

"""Prometheus metrics, fed by the run events (ingest.events) and by maintenance results; never by log lines.

`RunMetrics` is an events subscriber: `lakeline ingest --metrics-port P` subscribes one and serves its registry
(`serve`). `push_maintenance` reports what a maintenance command did (compaction, retention, a drill, a freshness
check) to a Pushgateway: an Airflow task is a short-lived batch job on whichever worker runs it, which is the case
Prometheus' docs give for the Pushgateway (a node-exporter textfile would need node_exporter on every worker and
leave stale files behind when the task moves); `LAKELINE_METRICS_TEXTFILE_DIR` writes the textfile instead.

Names follow Prometheus' conventions: base units (seconds, bytes), `_total` for counters, a `pipeline` label on
every series of a run. Committed offsets are gauges of the next position per source partition; Kinesis sequence
numbers exceed a float's 53-bit precision, so for Kinesis the gauge shows the order of magnitude only.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from ingest.events import (BatchCommitted, BatchReplayed, CommitReconciled, CommitRetried, Event, LeaseLost,
                           PipelineFailed, RunFinished, RunStarted, SchemaEvolved)

if TYPE_CHECKING:
    from collections.abc import Mapping

# Batch durations: a trickle batch commits in ~0.5 s, a drain batch of 1M records in ~20-40 s.
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _SinceLastCommit:
    """`lakeline_seconds_since_last_commit`, computed at scrape time: seconds since this driver's last commit of the
    pipeline, or since its run started when it has not committed yet (so a stalled start also grows)."""

    def __init__(self):
        self.last: dict[str, float] = {}

    def describe(self):
        return []

    def collect(self):
        family = GaugeMetricFamily("lakeline_seconds_since_last_commit",
                                   "Seconds since the pipeline's last commit by this driver (or since its start)",
                                   labels=["pipeline"])
        now = time.time()
        for pipeline, at in sorted(self.last.items()):
            family.add_metric([pipeline], max(0.0, now - at))
        yield family


class RunMetrics:
    """The metrics of pipeline runs, updated by each run event (call it with an event; subscribe it to `Events`)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.records = Counter("lakeline_records", "Records written to the main table", ["pipeline"], registry=r)
        self.dead_letters = Counter("lakeline_dead_letters", "Records written to the dead-letter table, by reason",
                                    ["pipeline", "reason"], registry=r)
        self.rescued_conflicts = Counter("lakeline_rescued_conflicts", "Rows written with a field null and its value "
                                         "in _rescued_data because it did not fit the field's type, by field",
                                         ["pipeline", "field"], registry=r)
        self.batches = Counter("lakeline_batches", "Micro-batches, by outcome (committed, or replayed: the tables "
                               "already held it)", ["pipeline", "outcome"], registry=r)
        self.batch_seconds = Histogram("lakeline_batch_duration_seconds", "Lakeline's time per committed batch",
                                       ["pipeline"], buckets=BATCH_BUCKETS, registry=r)
        self.phase_seconds = Histogram("lakeline_batch_phase_seconds", "Time per phase of a committed batch: "
                                       "Lakeline's (scan, dlq, table; turn: the table's wait for a rewrite's "
                                       "commit) and Spark's (spark_offsets, spark_wal, ...)",
                                       ["pipeline", "phase"], buckets=PHASE_BUCKETS, registry=r)
        self.lag = Gauge("lakeline_source_lag_records", "Records in the source past the last batch's end",
                         ["pipeline"], registry=r)
        self.last_commit = Gauge("lakeline_last_commit_timestamp_seconds", "UNIX time of the last committed batch",
                                 ["pipeline"], registry=r)
        self.offsets = Gauge("lakeline_committed_offset", "Next source position after the main table's end",
                             ["pipeline", "source", "partition"], registry=r)
        self.runs = Counter("lakeline_runs_started", "Runs started, by start plan (resume, fresh, rebuild, ...)",
                            ["pipeline", "plan"], registry=r)
        self.restarts = Counter("lakeline_pipeline_restarts", "Times a failed pipeline was started again",
                                ["pipeline"], registry=r)
        self.failures = Counter("lakeline_pipeline_failures", "Pipeline failures (restarted or not)", ["pipeline"],
                                registry=r)
        self.running = Gauge("lakeline_pipeline_running", "1 while the pipeline's query runs in this driver",
                             ["pipeline"], registry=r)
        self.evolutions = Counter("lakeline_schema_evolutions", "Schema changes applied to the main table",
                                  ["pipeline"], registry=r)
        self.commit_retries = Counter("lakeline_commit_retries", "Commits retried after a conflict or an unknown "
                                      "outcome", ["pipeline", "table"], registry=r)
        self.commits_reconciled = Counter("lakeline_commits_reconciled", "Unknown commit outcomes the table showed "
                                          "had landed", ["pipeline"], registry=r)
        self.lease_lost = Counter("lakeline_lease_lost", "Times the driver lost the pipeline's lease",
                                  ["pipeline"], registry=r)
        self._since = _SinceLastCommit()
        r.register(self._since)

    def __call__(self, event: Event) -> None:
        p = event.pipeline
        match event:
            case RunStarted():
                self.runs.labels(p, event.action).inc()
                self.running.labels(p).set(1)
                self._since.last.setdefault(p, event.at)
            case BatchCommitted():
                self._committed(event)
            case BatchReplayed():
                self.batches.labels(p, "replayed").inc()
                if event.lag is not None:
                    self.lag.labels(p).set(event.lag)
            case RunFinished():
                self.running.labels(p).set(0)
            case PipelineFailed():
                self.failures.labels(p).inc()
                self.running.labels(p).set(0)
                if event.retry_in is not None:
                    self.restarts.labels(p).inc()
            case SchemaEvolved():
                self.evolutions.labels(p).inc()
            case CommitRetried():
                self.commit_retries.labels(p, event.table).inc()
            case CommitReconciled():
                self.commits_reconciled.labels(p).inc()
            case LeaseLost():
                self.lease_lost.labels(p).inc()
                self.running.labels(p).set(0)

    def _committed(self, event: BatchCommitted) -> None:
        p = event.pipeline
        self.batches.labels(p, "committed").inc()
        self.records.labels(p).inc(event.rows)
        reasons = dict(event.dead_letter_reasons)
        unexplained = event.dead_letters - sum(reasons.values())
        if unexplained > 0:  # an event from before reasons were counted
            reasons["unknown"] = reasons.get("unknown", 0) + unexplained
        for reason, count in reasons.items():
            self.dead_letters.labels(p, reason).inc(count)
        for path, count in event.rescued_conflicts.items():
            self.rescued_conflicts.labels(p, path).inc(count)
        self.batch_seconds.labels(p).observe(event.seconds)
        for phase, seconds in event.phases.items():
            self.phase_seconds.labels(p, phase).observe(seconds)
        for phase, seconds in event.spark_phases.items():
            self.phase_seconds.labels(p, f"spark_{phase}").observe(seconds)
        if event.lag is not None:
            self.lag.labels(p).set(event.lag)
        self.last_commit.labels(p).set(event.at)
        self._since.last[p] = event.at
        for source, partitions in event.end.items():
            for partition, position in partitions.items():
                self.offsets.labels(p, source, str(partition)).set(float(position))


def serve(metrics: RunMetrics, port: int, host: str = "127.0.0.1"):
    """Serve `metrics` on http://host:port/metrics in a daemon thread; returns (server, thread). Port 0 picks a
    free port: `server.server_port` says which."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=metrics.registry)


def maintenance_registry(command: str, labels: "Mapping[str, str]", values: "Mapping[str, float]",
                         help_text: "Mapping[str, str]") -> CollectorRegistry:
    """A registry holding one gauge per `values` entry (named `lakeline_<command>_<name>`), labelled with
    `labels`, plus `lakeline_<command>_last_run_timestamp_seconds`."""
    registry = CollectorRegistry()
    names = list(labels)
    for name, value in values.items():
        gauge = Gauge(f"lakeline_{command}_{name}", help_text.get(name, name.replace("_", " ")), names,
                      registry=registry)
        gauge.labels(*labels.values()).set(value)
    stamp = Gauge(f"lakeline_{command}_last_run_timestamp_seconds", f"UNIX time the last {command} run ended",
                  names, registry=registry)
    stamp.labels(*labels.values()).set(time.time())
    return registry


def push_maintenance(command: str, labels: "Mapping[str, str]", values: "Mapping[str, float]",
                     help_text: "Mapping[str, str] | None" = None, gateway: str | None = None,
                     textfile_dir: str | None = None) -> str | None:
    """Report one maintenance run's figures: to the Pushgateway at `gateway` (job `lakeline_<command>`, grouped
    by `labels`, replacing that group's previous values), or as `<textfile_dir>/lakeline_<command>_<labels>.prom`
    for node_exporter's textfile collector. Returns where they went (None: neither is configured)."""
    registry = maintenance_registry(command, labels, values, help_text or {})
    if gateway:
        from prometheus_client import push_to_gateway
        from prometheus_client.exposition import basic_auth_handler, default_handler

        parts = urlsplit(gateway if "//" in gateway else f"http://{gateway}")
        handler = default_handler
        if parts.username:  # http://user:password@host:9091: basic auth, the credentials never in the request URL
            user, password = unquote(parts.username), unquote(parts.password or "")
            parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])

            def handler(url, method, timeout, headers, data):
                return basic_auth_handler(url, method, timeout, headers, data, user, password)

        push_to_gateway(urlunsplit(parts), job=f"lakeline_{command}", grouping_key=dict(labels), registry=registry,
                        handler=handler)
        return gateway
    if textfile_dir:
        from prometheus_client import write_to_textfile

        suffix = "_".join(re.sub(r"[^A-Za-z0-9_.-]", "_", v) for v in labels.values())
        path = Path(textfile_dir) / f"lakeline_{command}_{suffix}.prom"
        write_to_textfile(str(path), registry)  # written to a temporary file, then renamed: never half a file
        return str(path)
    return None

"""Kinesis source for Structured Streaming on Spark's Python Data Source API, exactly once.

    from ingest.sources.kinesis import register
    register(spark)
    spark.readStream.format("lakeline-kinesis").option("stream", "orders").options(**connection).load()

Options: stream (required); starting_position TRIM_HORIZON | LATEST | AT_TIMESTAMP:<epoch seconds>;
starting_positions (JSON {shard id: position}, overrides starting_position for those shards; other shards start at
TRIM_HORIZON: how a pipeline rebuilds its checkpoint from the table's offsets); max_records_per_batch;
until_arrival (epoch seconds: plan only records that arrived by then, so an available-now run ends even while
records keep coming; each shard's plan stops at its first later record); connection: endpoint, region,
access_key_id, secret_access_key, session_token.

Planning happens on the driver in latestOffset(): it reads ahead (at most the per-batch record limit, split over
the readable shards) and records, per shard, the last sequence number the batch includes. The records it read go
to the workers inside the batch's input partitions, so each record is fetched once. A partition planned without
them (a batch replayed after a restart, whose plan came from the offset log) reads AFTER_SEQUENCE_NUMBER <start>
up to and including that number: the same records, since a shard's records never change. Offset layout and
shard order: ingest.kinesis_offsets.

Columns: stream, shard_id, sequence_number (zero-padded decimal string, sorts numerically),
approximate_arrival_timestamp, partition_key, data (binary).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from ingest import kinesis_offsets as ko

NAME = "lakeline-kinesis"
SCHEMA = ("stream string, shard_id string, sequence_number string, approximate_arrival_timestamp timestamp, "
          "partition_key string, data binary")
DEFAULT_MAX_RECORDS = 100_000
MAX_SCAN_THREADS = 8  # shards the planner reads at once
CONNECTION_KEYS = ("endpoint", "region", "access_key_id", "secret_access_key", "session_token")


def register(spark) -> None:
    spark.dataSource.register(KinesisDataSource)


def _connection(options) -> dict[str, str]:
    return {k: options[k] for k in CONNECTION_KEYS if options.get(k)}


def _starting_position(value: str | None) -> str:
    value = (value or "TRIM_HORIZON").strip()
    if value in ("TRIM_HORIZON", "LATEST"):
        return value
    if value.startswith(ko.AT_TIMESTAMP):
        float(value[len(ko.AT_TIMESTAMP):])
        return value
    raise ValueError(f"starting_position {value!r}: use TRIM_HORIZON, LATEST or AT_TIMESTAMP:<epoch seconds>")


class KinesisPartition(InputPartition):
    """One shard's range of a batch, with its records when the planner read them (None: read them)."""

    def __init__(self, stream: str, shard: ko.ShardRange, connection: dict[str, str],
                 rows: list[tuple] | None = None):
        super().__init__(shard.shard_id)
        self.stream, self.shard, self.connection, self.rows = stream, shard, connection, rows


def _row(stream: str, shard_id: str, record: dict) -> tuple:
    return (stream, shard_id, ko.pad_sequence(record["SequenceNumber"]), record.get("ApproximateArrivalTimestamp"),
            record.get("PartitionKey"), bytes(record["Data"]))


def _same_start(a: str, b: str) -> bool:
    """Whether two positions start a read at the same place (AFTER:007 and AFTER:7 do)."""
    seq_a, seq_b = ko.last_sequence(a), ko.last_sequence(b)
    return seq_a == seq_b if seq_a is not None or seq_b is not None else a == b


class KinesisDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> "KinesisStreamReader":
        return KinesisStreamReader(dict(self.options))


class KinesisStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]):
        options = {k.lower(): v for k, v in options.items()}
        if not options.get("stream"):
            raise ValueError("the lakeline-kinesis source needs option 'stream'")
        self.stream = options["stream"]
        self.starting_position = _starting_position(options.get("starting_position"))
        self.max_records = int(options.get("max_records_per_batch") or DEFAULT_MAX_RECORDS)
        self.until_arrival = float(options["until_arrival"]) if options.get("until_arrival") else None
        explicit = options.get("starting_positions")
        self.explicit: dict[str, str] | None = None
        if explicit:
            self.explicit = {str(k): str(v) for k, v in json.loads(explicit).items()}
            for position in self.explicit.values():
                ko.last_sequence(position)  # validates
        self.connection = _connection(options)
        self._client = None
        self._initial: dict | None = None
        # The end of the newest batch Spark planned, ran or committed: the next plan starts here.
        self._current: dict[str, str] | None = None
        # What the newest plan read, per shard: (start position, last sequence, rows), for its input partitions.
        self._prefetched: dict[str, tuple[str, int, list[tuple]]] = {}

    @property
    def client(self):
        if self._client is None:
            from ingest.adapters.kinesis import KinesisClient

            self._client = KinesisClient(self.connection)
        return self._client

    def initialOffset(self) -> dict:
        if self._initial is None:
            shards = self.client.list_shards(self.stream)
            if self.explicit is not None:
                positions = ko.with_new_shards(self.explicit, shards, ko.TRIM_HORIZON, time.time(), first=True)
            else:
                positions = ko.with_new_shards({}, shards, self.starting_position, time.time(), first=True)
            self._initial = ko.offset(self.stream, positions)
        return self._initial

    def _advance(self, end: dict) -> None:
        positions = ko.positions_of(end)
        self._current = positions if self._current is None else ko.merge_max(self._current, positions)

    def latestOffset(self) -> dict:
        if self._current is None:
            self._current = ko.positions_of(self.initialOffset())
        shards = self.client.list_shards(self.stream)
        positions = ko.with_new_shards(self._current, shards, self.starting_position, time.time())
        readable = ko.readable_shards(shards, positions)
        self._prefetched = {}  # only the newest plan's records are kept: an older plan's batch reads its own
        budgets = ko.split_budget(self.max_records, len(readable))
        if len(readable) > 1:
            # The shards are read side by side: each GetRecords waits on the service, and one thread per shard
            # keeps the driver parsing one shard's page while the next page of another is on its way.
            with ThreadPoolExecutor(max_workers=min(len(readable), MAX_SCAN_THREADS),
                                    thread_name_prefix="lakeline-kinesis-plan") as pool:
                ends = list(pool.map(lambda sb: self._scan(sb[0], positions[sb[0].shard_id], sb[1]),
                                     zip(readable, budgets, strict=True)))
        else:
            ends = [self._scan(shard, positions[shard.shard_id], budget)
                    for shard, budget in zip(readable, budgets, strict=True)]
        for shard, end in zip(readable, ends, strict=True):
            positions[shard.shard_id] = end
        self._current = positions
        return ko.offset(self.stream, positions)

    def _scan(self, shard: ko.ShardInfo, position: str, budget: int) -> str:
        """The new planned position of one shard: at most `budget` records past `position`. The records read
        are kept for the batch's input partition."""
        count, last, finished = 0, None, False
        rows: list[tuple] = []
        for records, ended, caught_up in self.client.pages(self.stream, shard.shard_id, position,
                                                           page_limit=budget):
            take = records[:budget - count]
            later = self._first_after_cutoff(take)
            if later is not None:
                take = take[:later]  # a record that arrived after an available-now run began: stop before it
            if take:
                last, count = take[-1]["SequenceNumber"], count + len(take)
                rows.extend(_row(self.stream, shard.shard_id, r) for r in take)
            if later is not None:
                break
            if len(take) == len(records) and (ended or (caught_up and shard.closed)):
                # Read to the end of a closed shard: NextShardIterator is null, or nothing is behind.
                finished = True
            if count >= budget:
                break
        seq = int(last) if last is not None else ko.last_sequence(position)
        if rows:
            self._prefetched[shard.shard_id] = (position, int(last), rows)
        if not finished and shard.closed and seq is not None and seq >= int(shard.ending_sequence):
            finished = True
        if finished:
            return ko.done(seq)
        return ko.after(seq) if seq is not None else position

    def _first_after_cutoff(self, records: list[dict]) -> int | None:
        """Index of the first record that arrived after `until_arrival`, if any."""
        if self.until_arrival is None:
            return None
        for index, record in enumerate(records):
            arrived = record.get("ApproximateArrivalTimestamp")
            if arrived is not None and arrived.timestamp() > self.until_arrival:
                return index
        return None

    def partitions(self, start: dict, end: dict) -> list[KinesisPartition]:
        self._advance(end)
        return [KinesisPartition(self.stream, r, self.connection, self._planned_rows(r))
                for r in ko.plan_ranges(ko.positions_of(start), ko.positions_of(end))]

    def _planned_rows(self, shard: ko.ShardRange) -> list[tuple] | None:
        """The rows the planner read for exactly this range (handed over once), or None."""
        prefetched = self._prefetched.get(shard.shard_id)
        if prefetched is None:
            return None
        position, last, rows = prefetched
        if last != shard.end or not _same_start(position, shard.start):
            return None
        del self._prefetched[shard.shard_id]
        return rows

    def commit(self, end: dict) -> None:
        self._advance(end)

    def read(self, partition: KinesisPartition) -> Iterator[tuple]:
        from ingest.adapters.kinesis import KinesisClient
        from ingest.errors import KinesisError

        if partition.rows is not None:
            yield from partition.rows
            return
        client = KinesisClient(partition.connection)
        rng, stream = partition.shard, partition.stream
        for records, ended, _ in client.pages(stream, rng.shard_id, rng.start, max_empty_pages=50):
            for r in records:
                seq = int(r["SequenceNumber"])
                if seq > rng.end:
                    return
                yield _row(stream, rng.shard_id, r)
                if seq == rng.end:
                    return
            if ended:
                break
        raise KinesisError(f"Kinesis {stream}/{rng.shard_id}: planned records up to sequence {rng.end} are no "
                           f"longer readable from {rng.start} (trimmed by retention?)")

"""Kafka admin/producer adapter over confluent-kafka (topics, partitions, watermarks)."""

from __future__ import annotations

import re

from ingest.errors import ConfigError, LakelineError
from ingest.settings import Settings


def client_config(settings: Settings) -> dict[str, str]:
    """librdkafka config: bootstrap servers plus the LAKELINE_KAFKA_OPT_* security pass-through."""
    bootstrap = settings.require("kafka_bootstrap_servers", "LAKELINE_KAFKA_BOOTSTRAP_SERVERS", "reach Kafka")
    return {"bootstrap.servers": bootstrap, **settings.kafka_client_properties()}


def librdkafka_config(settings: Settings) -> dict:
    """`client_config` for the Python (librdkafka) clients: errors only in the log, not notices such as
    transient coordinator retries."""
    return {**client_config(settings), "log_level": 3}


class KafkaAdmin:
    def __init__(self, settings: Settings, timeout: float = 15.0):
        from confluent_kafka.admin import AdminClient

        self._config = librdkafka_config(settings)
        self._admin = AdminClient(self._config)
        self._timeout = timeout

    def _metadata(self):
        from confluent_kafka import KafkaException

        try:
            return self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise LakelineError(f"Kafka at {self._config['bootstrap.servers']} did not answer: {exc}. Is the broker "
                                f"running (`lakeline dev up`) and LAKELINE_KAFKA_BOOTSTRAP_SERVERS right?") from exc

    def topics(self) -> list[str]:
        return sorted(t for t in self._metadata().topics if not t.startswith("__"))

    def resolve_topics(self, topics: list[str] | None, pattern: str | None) -> list[str]:
        existing = self.topics()
        if topics:
            missing = [t for t in topics if t not in existing]
            if missing:
                raise ConfigError(f"source.topics: topic(s) {missing} do not exist on "
                                  f"{self._config['bootstrap.servers']}; create them or fix the name.")
            return list(topics)
        regex = re.compile(pattern or "")
        return [t for t in existing if regex.fullmatch(t)]

    def partitions(self, topic: str) -> list[int]:
        meta = self._metadata().topics.get(topic)
        if meta is None:
            raise ConfigError(f"topic {topic!r} does not exist on {self._config['bootstrap.servers']}")
        return sorted(meta.partitions)

    def ensure_topic(self, topic: str, partitions: int = 4) -> bool:
        """Create `topic` if missing; returns True if created."""
        from confluent_kafka.admin import NewTopic

        if topic in self._metadata().topics:
            return False
        future = self._admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
        future.result(timeout=self._timeout)
        return True

    def delete_topic(self, topic: str) -> bool:
        """Delete `topic` if it exists; returns True if it was deleted."""
        if topic not in self._metadata().topics:
            return False
        self._admin.delete_topics([topic])[topic].result(timeout=self._timeout)
        return True

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (low, high): offsets [low, high) are currently in the log."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self._config, "group.id": "lakeline-admin", "enable.auto.commit": False})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self._timeout)
                    for p in self.partitions(topic)}
        finally:
            consumer.close()

"""Kafka admin/producer adapter over confluent-kafka (topics, partitions, watermarks)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from ingest.errors import ConfigError, LakelineError
from ingest.settings import Settings


JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def _security(settings: Settings) -> str | None:
    """The security protocol, checked against what it needs (each missing setting named)."""
    protocol = settings.kafka_security_protocol
    given = [f"LAKELINE_{f.upper()}" for f in ("kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password",
                                               "kafka_ssl_ca_location", "kafka_ssl_keystore_location",
                                               "kafka_ssl_keystore_password") if getattr(settings, f)]
    if protocol is None:
        if given:
            raise ConfigError(f"{', '.join(given)} set but LAKELINE_KAFKA_SECURITY_PROTOCOL is not: set it to SSL, "
                              f"SASL_SSL or SASL_PLAINTEXT (unset, the connection is plaintext and these are unused)")
        return None
    needs = []
    if protocol.startswith("SASL_"):
        needs += [("kafka_sasl_mechanism", "LAKELINE_KAFKA_SASL_MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"),
                  ("kafka_sasl_username", "LAKELINE_KAFKA_SASL_USERNAME"),
                  ("kafka_sasl_password", "LAKELINE_KAFKA_SASL_PASSWORD")]
    if settings.kafka_ssl_keystore_location:
        needs.append(("kafka_ssl_keystore_password", "LAKELINE_KAFKA_SSL_KEYSTORE_PASSWORD"))
    missing = [variable for field, variable in needs if not getattr(settings, field)]
    if missing:
        raise ConfigError(f"LAKELINE_KAFKA_SECURITY_PROTOCOL={protocol} needs {', '.join(missing)}")
    for field in ("kafka_ssl_ca_location", "kafka_ssl_keystore_location"):
        path = getattr(settings, field)
        if path and not Path(path).is_file():
            raise ConfigError(f"LAKELINE_{field.upper()}={path}: no such file")
    return protocol


def _common(settings: Settings) -> tuple[dict[str, str], str | None]:
    """What both clients' configs start with (the same names in both): bootstrap servers and the checked security
    protocol; and that protocol."""
    config = {"bootstrap.servers": settings.require("kafka_bootstrap_servers", "LAKELINE_KAFKA_BOOTSTRAP_SERVERS",
                                                    "reach Kafka")}
    protocol = _security(settings)
    if protocol:
        config["security.protocol"] = protocol
    return config, protocol


def java_client_config(settings: Settings) -> dict[str, str]:
    """Kafka client properties for the JVM client (Spark's Kafka source): bootstrap servers, the typed security
    settings in the Java client's names (a JAAS line for SASL, PEM truststore, PKCS#12 keystore), then the
    LAKELINE_KAFKA_OPT_* pass-through. Secrets revealed: hand it to the client only."""
    config, protocol = _common(settings)
    if protocol and protocol.startswith("SASL_"):
        quote = lambda value: value.replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731 - JAAS string
        config["sasl.mechanism"] = settings.kafka_sasl_mechanism
        config["sasl.jaas.config"] = (
            f'{JAAS_MODULES[settings.kafka_sasl_mechanism]} required username="{quote(settings.kafka_sasl_username)}" '
            f'password="{quote(settings.kafka_sasl_password.get_secret_value())}";')
    if settings.kafka_ssl_ca_location:
        config |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": settings.kafka_ssl_ca_location}
    if settings.kafka_ssl_keystore_location:
        password = settings.kafka_ssl_keystore_password.get_secret_value()
        config |= {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": settings.kafka_ssl_keystore_location,
                   "ssl.keystore.password": password, "ssl.key.password": password}
    return {**config, **settings.kafka_client_properties()}


def client_config(settings: Settings) -> dict[str, str]:
    """librdkafka config (the Python clients): bootstrap servers, the typed security settings in librdkafka's
    names, then the LAKELINE_KAFKA_OPT_* pass-through."""
    config, protocol = _common(settings)
    if protocol and protocol.startswith("SASL_"):
        config |= {"sasl.mechanism": settings.kafka_sasl_mechanism, "sasl.username": settings.kafka_sasl_username,
                   "sasl.password": settings.kafka_sasl_password.get_secret_value()}
    if settings.kafka_ssl_ca_location:
        config["ssl.ca.location"] = settings.kafka_ssl_ca_location
    if settings.kafka_ssl_keystore_location:
        config |= {"ssl.keystore.location": settings.kafka_ssl_keystore_location,
                   "ssl.keystore.password": settings.kafka_ssl_keystore_password.get_secret_value()}
    return {**config, **settings.kafka_client_properties()}


def librdkafka_config(settings: Settings) -> dict:
    """`client_config` for the Python (librdkafka) clients: errors only in the log, not notices such as
    transient coordinator retries."""
    return {**client_config(settings), "log_level": 3}


def new_client(kind, config: dict):
    """A confluent-kafka client of `kind` (AdminClient, Producer, Consumer); a configuration librdkafka refuses
    (an unreadable keystore, a wrong keystore password) is a ConfigError naming the setting."""
    from confluent_kafka import KafkaException

    try:
        return kind(config)
    except KafkaException as exc:
        error = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        hint = (" (LAKELINE_KAFKA_SSL_KEYSTORE_LOCATION, LAKELINE_KAFKA_SSL_KEYSTORE_PASSWORD: the wrong password, or "
                "not a PKCS#12 file?)" if "keystore" in error.lower() or "pkcs#12" in error.lower() else "")
        raise ConfigError(f"Kafka client settings refused: {error}{hint}") from None


def security_problem(errors: list[str], settings: Settings) -> str | None:
    """What a client's error reports say about its security settings (None: nothing security-related): refused
    credentials, an untrusted broker certificate, or a client certificate the broker refused."""
    text = " ".join(errors)
    lowered = text.lower()
    protocol = settings.kafka_security_protocol or ""
    if protocol.startswith("SASL_") and "sasl authentication" in lowered:
        return (f"Kafka refused the credentials of user {settings.kafka_sasl_username!r} "
                f"({settings.kafka_sasl_mechanism}): check LAKELINE_KAFKA_SASL_USERNAME and "
                f"LAKELINE_KAFKA_SASL_PASSWORD")
    if "certificate verify failed" in lowered or "unable to get local issuer" in lowered:
        return (f"the broker's TLS certificate is not trusted: LAKELINE_KAFKA_SSL_CA_LOCATION="
                f"{settings.kafka_ssl_ca_location} is not the CA that signed it")
    if "ssl handshake failed" in lowered or ("ssl" in lowered and "alert" in lowered):
        return (f"the TLS handshake with the broker failed ({_first(errors)}): a client certificate it does not "
                f"trust (LAKELINE_KAFKA_SSL_KEYSTORE_LOCATION), or the wrong LAKELINE_KAFKA_SECURITY_PROTOCOL")
    if "might be caused by incorrect security.protocol" in lowered:
        return (f"the broker closed the connection during the TLS handshake ({_first(errors)}): check "
                f"LAKELINE_KAFKA_SECURITY_PROTOCOL (now {settings.kafka_security_protocol or 'PLAINTEXT'}) and, "
                f"for mTLS, the client certificate")
    return None


def _first(errors: list[str]) -> str:
    return errors[0][:300] if errors else ""


class KafkaAdmin:
    def __init__(self, settings: Settings, timeout: float = 15.0):
        from confluent_kafka.admin import AdminClient

        self._settings = settings
        self._config = librdkafka_config(settings)
        self._errors: list[str] = []  # what librdkafka reported (a refused login, a failed TLS handshake)
        self._admin = new_client(AdminClient, {**self._config, "error_cb": lambda e: self._errors.append(str(e))})
        self._timeout = timeout

    def _metadata(self):
        """The cluster's metadata. A refused login or TLS handshake fails at once, saying which setting to fix."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return self._admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            except KafkaException as exc:
                self._admin.poll(0)  # serves error_cb: what librdkafka saw (a refused login, a failed handshake)
                problem = security_problem(self._errors, self._settings)
                if problem:
                    raise ConfigError(f"Kafka at {self._config['bootstrap.servers']}: {problem}") from None
                if time.monotonic() >= deadline:
                    raise LakelineError(f"Kafka at {self._config['bootstrap.servers']} did not answer: {exc}. Is "
                                        f"the broker running (`lakeline dev up`) and LAKELINE_KAFKA_BOOTSTRAP_SERVERS "
                                        f"right?") from exc

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

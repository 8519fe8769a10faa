"""Kafka security settings, typed, in each client's own property names (ingest.adapters.kafka_admin): the JVM's for
Spark's source, librdkafka's for the Python side; what is missing is named; secrets stay masked when shown; a
client's error reports become an error that says which setting to fix."""

from __future__ import annotations

import pytest

from ingest.adapters.kafka_admin import client_config, java_client_config, security_problem
from ingest.errors import ConfigError
from ingest.settings import Settings


def _settings(tmp_path, **values) -> Settings:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    return Settings(kafka_bootstrap_servers="127.0.0.1:9093", kafka_ssl_ca_location=str(ca), **values)


def test_sasl_ssl_in_both_clients_names(tmp_path):
    settings = _settings(tmp_path, kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512",
                         kafka_sasl_username="lake", kafka_sasl_password='p"a\\ss')
    java = java_client_config(settings)
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="lake" password="p\\"a\\\\ss";')
    assert java["ssl.truststore.type"] == "PEM" and java["ssl.truststore.location"].endswith("ca.pem")
    native = client_config(settings)
    assert native["sasl.username"] == "lake" and native["sasl.password"] == 'p"a\\ss'
    assert native["ssl.ca.location"].endswith("ca.pem") and "sasl.jaas.config" not in native


def test_mtls_keystore_in_both_clients_names(tmp_path):
    keystore = tmp_path / "client.p12"
    keystore.write_bytes(b"\x30")
    settings = _settings(tmp_path, kafka_security_protocol="SSL", kafka_ssl_keystore_location=str(keystore),
                         kafka_ssl_keystore_password="store-secret")
    java = java_client_config(settings)
    assert java["ssl.keystore.type"] == "PKCS12" and java["ssl.keystore.password"] == "store-secret"
    assert java["ssl.key.password"] == "store-secret" and "sasl.mechanism" not in java
    native = client_config(settings)
    assert native["ssl.keystore.location"] == str(keystore) and native["ssl.keystore.password"] == "store-secret"


@pytest.mark.parametrize(("values", "named"), [
    ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "u"},
     "LAKELINE_KAFKA_SASL_PASSWORD"),
    ({"kafka_security_protocol": "SASL_SSL"}, "LAKELINE_KAFKA_SASL_MECHANISM"),
    ({"kafka_security_protocol": "SSL", "kafka_ssl_keystore_location": "/x.p12"},
     "LAKELINE_KAFKA_SSL_KEYSTORE_PASSWORD"),
    ({"kafka_security_protocol": "SSL", "kafka_ssl_keystore_location": "/nowhere/x.p12",
      "kafka_ssl_keystore_password": "p"}, "LAKELINE_KAFKA_SSL_KEYSTORE_LOCATION=/nowhere/x.p12: no such file"),
])
def test_what_is_missing_is_named(tmp_path, values, named):
    with pytest.raises(ConfigError, match=named):
        java_client_config(_settings(tmp_path, **values))


def test_secrets_are_masked_when_settings_are_shown(tmp_path):
    settings = _settings(tmp_path, kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="PLAIN",
                         kafka_sasl_username="u", kafka_sasl_password="hunter2-secret",
                         kafka_ssl_keystore_password="store-secret")
    shown = str(settings.describe()) + repr(settings)
    assert "hunter2-secret" not in shown and "store-secret" not in shown
    assert settings.describe()["kafka_sasl_username"] == "u"


@pytest.mark.parametrize(("error", "says"), [
    ("SASL authentication error: Authentication failed during authentication due to invalid credentials with "
     "SASL mechanism SCRAM-SHA-512", "refused the credentials of user 'u'"),
    ("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not "
     "be verified", "TLS certificate is not trusted"),
    ("SSL handshake failed: error:0A000418:SSL routines::tlsv1 alert unknown ca", "TLS handshake"),
    ("Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration",
     "TLS handshake"),
])
def test_client_errors_become_what_to_fix(tmp_path, error, says):
    settings = _settings(tmp_path, kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512",
                         kafka_sasl_username="u", kafka_sasl_password="p")
    assert says in security_problem([error], settings)
    assert security_problem(["Connection refused"], settings) is None  # a down broker is not a security problem


def test_security_settings_without_a_protocol_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="LAKELINE_KAFKA_SASL_PASSWORD set but LAKELINE_KAFKA_SECURITY_PROTOCOL"):
        client_config(Settings(kafka_bootstrap_servers="127.0.0.1:9093", kafka_sasl_password="p"))


def test_an_mtls_handshake_refusal_is_not_called_a_login_refusal(tmp_path):
    settings = _settings(tmp_path, kafka_security_protocol="SSL")
    error = ("SSL handshake failed: error:0A00010B:SSL routines::wrong version number: client SSL authentication "
             "might be required (see ssl.key.location and ssl.certificate.location and consult the broker logs)")
    assert "TLS handshake" in security_problem([error], settings)

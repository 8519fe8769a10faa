"""TLS and SASL material for the local broker (`lakeline dev up --kafka-security sasl_ssl|mtls`), made with the
JDK's keytool into the stack's state folder (mode 0700): a CA, the broker's certificate for 127.0.0.1 signed by
it, and for mTLS a client certificate; SCRAM-SHA-512 users for SASL. Passwords are random, per stack, and only
in the state folder's files (0600): the broker's properties and the client settings for stack.env.

keytool reads the store password from its environment, never its arguments. One exception: the SCRAM passwords go
to the broker's storage format command as arguments (Kafka's StorageTool takes them no other way), visible in this
machine's process list for the seconds that command runs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from infra.procs import ComponentError

MODES = ("sasl_ssl", "mtls")
CLIENT_USER = "lakeline"
ADMIN_USER = "admin"  # the broker's own inter-broker login
VALIDITY_DAYS = "3650"


@dataclass
class KafkaSecurity:
    """What one secured broker needs: its listener protocol, properties lines, SCRAM users to create at format
    time, and the client settings (LAKELINE_* names) that go to stack.env."""

    mode: str
    protocol: str  # SASL_SSL or SSL
    broker_properties: list[str] = field(default_factory=list)
    scram_users: dict[str, str] = field(default_factory=dict)
    client_env: dict[str, str] = field(default_factory=dict)
    client_config: dict[str, str] = field(default_factory=dict)  # librdkafka's, for the stack's health check


STOREPASS_ENV = "LAKELINE_KEYTOOL_STOREPASS"  # keytool reads the store password from it, not from its arguments


def _keytool(password: str, *args: str) -> None:
    keytool = shutil.which("keytool")
    if keytool is None:
        raise ComponentError("kafka security: `keytool` (the JDK's) is not on PATH; install Java 17+")
    done = subprocess.run([keytool, *args, "-storepass:env", STOREPASS_ENV], capture_output=True, text=True,
                          env={**os.environ, STOREPASS_ENV: password})
    if done.returncode != 0:
        raise ComponentError(f"kafka security: keytool {' '.join(args[:2])} failed: {done.stderr or done.stdout}")


def _signed_keystore(folder: Path, name: str, dname: str, ca: Path, store_password: str,
                     san: str | None = None) -> Path:
    """A PKCS#12 keystore `<name>.p12` with a key pair whose certificate the CA signed (and the CA's certificate)."""
    store = folder / f"{name}.p12"
    common = ["-storetype", "PKCS12"]
    ext = ["-ext", f"SAN={san}"] if san else []
    keytool = lambda *args: _keytool(store_password, *args)  # noqa: E731 - every call uses the one store password
    keytool("-genkeypair", "-alias", name, "-dname", dname, "-keyalg", "RSA", "-keysize", "2048", "-validity",
            VALIDITY_DAYS, "-keystore", str(store), *common, *ext)
    csr, crt = folder / f"{name}.csr", folder / f"{name}.crt"
    keytool("-certreq", "-alias", name, "-keystore", str(store), *common, "-file", str(csr))
    keytool("-gencert", "-alias", "ca", "-keystore", str(ca), *common, "-infile", str(csr), "-outfile", str(crt),
            "-rfc", "-validity", VALIDITY_DAYS, *ext)
    keytool("-importcert", "-alias", "ca", "-keystore", str(store), *common, "-file", str(folder / "ca.pem"),
            "-noprompt", "-trustcacerts")
    keytool("-importcert", "-alias", name, "-keystore", str(store), *common, "-file", str(crt), "-noprompt")
    csr.unlink()
    return store


def make_security(mode: str, folder: Path) -> KafkaSecurity:
    """Make (again) the keys, certificates and users for `mode` under `folder` and say how to use them."""
    if mode not in MODES:
        raise ComponentError(f"--kafka-security {mode!r}: choose one of {', '.join(MODES)}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    store_password = secrets.token_urlsafe(18)
    ca = folder / "ca.p12"
    _keytool(store_password, "-genkeypair", "-alias", "ca", "-dname", "CN=lakeline-local-ca", "-keyalg", "RSA",
             "-keysize", "2048", "-validity", VALIDITY_DAYS, "-ext", "bc:c", "-keystore", str(ca), "-storetype",
             "PKCS12")
    _keytool(store_password, "-exportcert", "-alias", "ca", "-keystore", str(ca), "-storetype", "PKCS12", "-rfc",
             "-file", str(folder / "ca.pem"))
    broker = _signed_keystore(folder, "broker", "CN=127.0.0.1", ca, store_password, san="ip:127.0.0.1,dns:localhost")
    ca_pem = str(folder / "ca.pem")
    tls = ["ssl.keystore.type=PKCS12", f"ssl.keystore.location={broker}", f"ssl.keystore.password={store_password}",
           f"ssl.key.password={store_password}", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca_pem}",
           "ssl.endpoint.identification.algorithm=https"]
    if mode == "sasl_ssl":
        client_password, admin_password = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
        security = KafkaSecurity(mode, "SASL_SSL", scram_users={CLIENT_USER: client_password,
                                                                 ADMIN_USER: admin_password})
        security.broker_properties = tls + [
            "sasl.enabled.mechanisms=SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram."
            f'ScramLoginModule required username="{ADMIN_USER}" password="{admin_password}";']
        security.client_env = {"LAKELINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                               "LAKELINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                               "LAKELINE_KAFKA_SASL_USERNAME": CLIENT_USER,
                               "LAKELINE_KAFKA_SASL_PASSWORD": client_password,
                               "LAKELINE_KAFKA_SSL_CA_LOCATION": ca_pem}
    else:
        client = _signed_keystore(folder, "client", f"CN={CLIENT_USER}", ca, store_password)
        security = KafkaSecurity(mode, "SSL")
        security.broker_properties = tls + ["ssl.client.auth=required"]
        security.client_env = {"LAKELINE_KAFKA_SECURITY_PROTOCOL": "SSL", "LAKELINE_KAFKA_SSL_CA_LOCATION": ca_pem,
                               "LAKELINE_KAFKA_SSL_KEYSTORE_LOCATION": str(client),
                               "LAKELINE_KAFKA_SSL_KEYSTORE_PASSWORD": store_password}
    security.client_config = librdkafka_client(security.client_env)
    client_env = folder / CLIENT_ENV
    client_env.write_text("".join(f"{key}={value}\n" for key, value in security.client_env.items()))
    for path in folder.iterdir():
        os.chmod(path, 0o600)
    return security


CLIENT_ENV = "client.env"
_LIBRDKAFKA = {"LAKELINE_KAFKA_SECURITY_PROTOCOL": "security.protocol",
               "LAKELINE_KAFKA_SASL_MECHANISM": "sasl.mechanism",
               "LAKELINE_KAFKA_SASL_USERNAME": "sasl.username", "LAKELINE_KAFKA_SASL_PASSWORD": "sasl.password",
               "LAKELINE_KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
               "LAKELINE_KAFKA_SSL_KEYSTORE_LOCATION": "ssl.keystore.location",
               "LAKELINE_KAFKA_SSL_KEYSTORE_PASSWORD": "ssl.keystore.password"}


def client_env(folder: Path) -> dict[str, str]:
    """The client settings `make_security` wrote for this broker (LAKELINE_* names; secrets included)."""
    path = folder / CLIENT_ENV
    if not path.is_file():
        raise ComponentError(f"kafka security: {path} is missing; `lakeline dev down` and up again")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def librdkafka_client(env: dict[str, str]) -> dict[str, str]:
    """`client_env` in librdkafka's property names (the stack's own health checks)."""
    return {_LIBRDKAFKA[key]: value for key, value in env.items() if key in _LIBRDKAFKA}

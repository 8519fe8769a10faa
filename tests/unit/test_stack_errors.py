"""The local stack names the component that failed and why, without needing the real components."""

import os
import socket
import subprocess
import sys

import pytest

from infra.kafka_broker import start_broker
from infra.procs import ComponentError, free_port, pid_alive, wait_until


def test_missing_kafka_jars_point_to_setup(tmp_path):
    with pytest.raises(ComponentError, match=r"kafka: no kafka_2.13 jar .* infra/setup.sh"):
        start_broker(tmp_path / "jars", tmp_path / "work")


def test_missing_java_is_named(tmp_path, monkeypatch):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ComponentError, match=r"`java` is not on PATH"):
        start_broker(jars, tmp_path / "work")


def test_a_component_that_exits_during_start_up_reports_its_log(tmp_path):
    log = tmp_path / "thing.log"
    log.write_text("line 1\nBindException: Address already in use\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    proc.wait()
    with pytest.raises(ComponentError, match=r"thing exited during start-up(.|\n)*Address already in use"):
        wait_until(lambda: False, 5, "thing", alive=lambda: proc.poll() is None, log=log)


def test_timeout_names_the_component(tmp_path):
    with pytest.raises(ComponentError, match=r"slow thing did not become healthy within 1s"):
        wait_until(lambda: False, 1, "slow thing")


def test_free_port_is_bindable_and_pid_alive_checks_the_marker():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert pid_alive(os.getpid())
    assert not pid_alive(os.getpid(), marker="/not/our/stack")

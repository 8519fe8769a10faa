"""The fault-injecting proxy (infra/faultproxy.py) against a small HTTP server on loopback: each mode does what it
says, and a timed fault ends by itself."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra.faultproxy import FaultProxy


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's API
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def proxy():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with FaultProxy(("127.0.0.1", server.server_port)) as fault:
        yield fault
    server.shutdown()


def get(port: int, timeout: float = 10) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", "/bucket/key")
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_pass_forwards(proxy):
    assert get(proxy.port) == (200, b"ok")


def test_refuse_for_a_while_then_pass_again(proxy):
    proxy.set("refuse", seconds=1.0)
    with pytest.raises(ConnectionRefusedError):
        get(proxy.port)
    deadline = time.monotonic() + 10
    while proxy.mode != "pass" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(proxy.port) == (200, b"ok")
    assert proxy.stats["refused_seconds"] >= 0.9


def test_reset_drops_open_and_new_connections(proxy):
    open_one = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    time.sleep(0.2)  # accepted and connected upstream
    proxy.set("reset")
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError)):
        get(proxy.port)
    with pytest.raises((ConnectionResetError, OSError)):
        open_one.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        if not open_one.recv(10):
            raise ConnectionResetError("closed")
    assert proxy.stats["resets"] >= 2
    proxy.set("pass")
    assert get(proxy.port) == (200, b"ok")


def test_latency_delays_each_exchange(proxy):
    proxy.set("latency", latency=0.3)
    started = time.monotonic()
    assert get(proxy.port) == (200, b"ok")
    assert time.monotonic() - started >= 0.6  # the request one way, the answer the other


def test_slowdown_answers_s3s_throttling_reply(proxy):
    proxy.set("slowdown")
    status, body = get(proxy.port)
    assert status == 503 and b"<Code>SlowDown</Code>" in body
    assert proxy.stats["slowdowns"] == 1


def test_only_loopback_and_known_modes(proxy):
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy(("127.0.0.1", 1), host="0.0.0.0")
    with pytest.raises(ValueError, match="unknown mode"):
        proxy.set("flood")

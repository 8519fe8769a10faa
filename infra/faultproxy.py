"""A fault-injecting TCP proxy for tests and drills, loopback only: put it in front of the S3 endpoint (or any TCP
service) and take the service away on purpose.

Modes (`FaultProxy.set`):
  pass      forward bytes both ways (the default)
  refuse    stop listening: new connections get ECONNREFUSED; open ones are dropped
  reset     accept, then reset (RST): every open and new connection
  latency   forward, delaying each chunk by `latency` seconds (both directions)
  slowdown  HTTP-aware, for S3: answer every request with `503 SlowDown` (S3's throttling reply) and close

A mode can be given `seconds`, after which the proxy passes again. Run it alone:
    python -m infra.faultproxy --target 127.0.0.1:9000   # prints its port; then type e.g. `refuse 30`, `reset`,
                                                         # `latency 60 1.5` (1.5 s per chunk for 60 s), `pass`
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import sys
import threading
import time

MODES = ("pass", "refuse", "reset", "latency", "slowdown")
SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your '
                 b'request rate.</Message><RequestId>lakeline-faultproxy</RequestId></Error>')
CHUNK = 65536


class FaultProxy:
    """A proxy from 127.0.0.1:`port` (0: a free one) to `target` (host, port), on its own thread and event loop.
    Counts what it did (`stats`), so a test can show the fault was really injected."""

    def __init__(self, target: tuple[str, int], port: int = 0, host: str = "127.0.0.1"):
        if not host.startswith("127."):
            raise ValueError(f"the fault proxy listens on loopback only, not {host}")
        self.target, self.host = target, host
        self.mode, self.latency, self._until, self._refused_at = "pass", 0.0, None, 0.0
        self.stats = {"connections": 0, "refused_seconds": 0.0, "resets": 0, "slowdowns": 0}
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultproxy", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self.port = self._call(self._listen(port))
        except BaseException:
            self._end_loop()
            raise

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set(self, mode: str, seconds: float | None = None, latency: float = 1.0) -> None:
        """Switch to `mode` (for `seconds`, then back to pass)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
        self._call(self._switch(mode, seconds, latency))

    def close(self) -> None:
        """Stop listening, reset open connections, end the loop (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._shutdown())
        finally:
            self._end_loop()

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the event loop's side

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    async def _listen(self, port: int) -> int:
        self._server = await asyncio.start_server(self._client, self.host, port, reuse_address=True)
        return self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            _reset(writer)

    async def _shutdown(self) -> None:
        """Stop listening and end every connection's task, so the loop stops with none pending."""
        await self._stop()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _switch(self, mode: str, seconds: float | None, latency: float) -> None:
        if self.mode == "refuse" and self._server is None:
            self.stats["refused_seconds"] += time.monotonic() - self._refused_at
            await self._listen(self.port)
        self.mode, self.latency = mode, latency
        self._until = None if seconds is None else time.monotonic() + seconds
        if mode in ("refuse", "reset"):
            for writer in list(self._writers):
                _reset(writer)
                self.stats["resets"] += 1
        if mode == "refuse":
            await self._stop()
            self._refused_at = time.monotonic()
        if seconds is not None:
            self._loop.call_later(seconds, lambda: asyncio.ensure_future(self._expire(mode)))

    async def _expire(self, mode: str) -> None:
        if self.mode == mode and self._until is not None and time.monotonic() >= self._until - 0.01:
            await self._switch("pass", None, 0.0)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        if self.mode == "reset":
            self.stats["resets"] += 1
            _reset(writer)
            return
        if self.mode == "slowdown":
            await self._slowdown(reader, writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}
            for w in (writer, up_writer):
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                if self.mode == "latency":
                    await asyncio.sleep(self.latency)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass  # the other side went away (or a reset was injected): the peer pipe ends too
        finally:
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                pass  # already closed or reset

    async def _slowdown(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read one HTTP request (head and Content-Length body), answer S3's 503 SlowDown, close."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if length and b"100-continue" not in head.lower():
                await reader.readexactly(length)
            self.stats["slowdowns"] += 1  # counted before the reply, which a client may read at once
            writer.write(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                         + f"Content-Length: {len(SLOWDOWN_BODY)}\r\n\r\n".encode() + SLOWDOWN_BODY)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0) instead of a FIN: the peer sees 'connection reset'."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed
    writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.faultproxy", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, metavar="HOST:PORT", help="the service to put the proxy before")
    parser.add_argument("--port", type=int, default=0, help="port to listen on, on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    proxy = FaultProxy((host, int(port)), args.port)
    print(f"fault proxy on 127.0.0.1:{proxy.port} -> {args.target}; commands: <mode> [seconds [latency]] "
          f"(modes: {', '.join(MODES)})", flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            try:
                proxy.set(words[0], float(words[1]) if len(words) > 1 else None,
                          float(words[2]) if len(words) > 2 else 1.0)
                print(f"mode {proxy.mode}", flush=True)
            except ValueError as exc:
                print(f"error: {exc}", flush=True)
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

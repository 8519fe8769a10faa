"""moto server as the local S3 and Kinesis endpoint, in its own process on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.procs import marked_env, free_port, wait_until


@dataclass
class MotoProcess:
    pid: int
    port: int
    endpoint: str
    log: Path


def moto_healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def start_moto(work_dir: Path, timeout: float = 60.0) -> MotoProcess:
    """Start `python -m moto.server` with the current interpreter (the venv's)."""
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / "moto.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=marked_env(str(work_dir)))
    endpoint = f"http://127.0.0.1:{port}"
    wait_until(lambda: moto_healthy(endpoint), timeout, f"moto server on {endpoint}",
               alive=lambda: proc.poll() is None, log=log)
    return MotoProcess(pid=proc.pid, port=port, endpoint=endpoint, log=log)

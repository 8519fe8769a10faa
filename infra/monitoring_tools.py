"""Prometheus's own tools for checking Lakeline's monitoring artifacts: `promtool` (the rule parser and the rule
unit-test runner), the Prometheus server and the Pushgateway, taken from Debian's packages (`apt-get download`, no
install, no root needed to unpack) into .lakeline/tools/prometheus. Used by tests/integration/test_monitoring_tools.py;
about 23 MB, once.

    .venv/bin/python -m infra.monitoring_tools     # fetch them (idempotent) and print their paths
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from infra.paths import REPO_ROOT
from infra.procs import ComponentError

PACKAGES = ("prometheus", "prometheus-pushgateway")  # promtool ships with the server


@dataclass(frozen=True)
class PrometheusTools:
    promtool: Path
    prometheus: Path
    pushgateway: Path

    def all(self) -> tuple[Path, ...]:
        return self.promtool, self.prometheus, self.pushgateway


def tools_dir() -> Path:
    return REPO_ROOT / ".lakeline" / "tools" / "prometheus"


def prometheus_tools() -> PrometheusTools:
    """The tools, fetched from Debian's archive the first time. ComponentError says why when they cannot be."""
    root = tools_dir()
    bin_dir = root / "usr" / "bin"
    tools = PrometheusTools(bin_dir / "promtool", bin_dir / "prometheus", bin_dir / "prometheus-pushgateway")
    if all(path.exists() for path in tools.all()):
        return tools
    for needed in ("apt-get", "dpkg-deb"):
        if shutil.which(needed) is None:
            raise ComponentError(f"fetching Prometheus's tools needs {needed} (a Debian or Ubuntu machine); on "
                                 f"another system put promtool, prometheus and prometheus-pushgateway under "
                                 f"{bin_dir}")
    with tempfile.TemporaryDirectory(prefix="lakeline-debs-") as work:
        done = subprocess.run(["apt-get", "download", *PACKAGES], cwd=work, capture_output=True, text=True,
                              timeout=600)
        debs = sorted(Path(work).glob("*.deb"))
        if done.returncode != 0 or len(debs) != len(PACKAGES):
            raise ComponentError(f"apt-get download {' '.join(PACKAGES)} failed (exit {done.returncode}): "
                                 f"{done.stderr.strip()[-800:]} -- is the package index there (apt-get update)?")
        staging = root.with_name(root.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for deb in debs:
            unpacked = subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], capture_output=True, text=True,
                                      timeout=300)
            if unpacked.returncode != 0:
                raise ComponentError(f"dpkg-deb -x {deb.name} failed: {unpacked.stderr.strip()[-800:]}")
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)  # all or nothing: a half-unpacked folder is never taken for the tools
    if not all(path.exists() for path in tools.all()):
        raise ComponentError(f"the packages {', '.join(PACKAGES)} did not hold promtool, prometheus and "
                             "prometheus-pushgateway")
    return tools


if __name__ == "__main__":
    found = prometheus_tools()
    print(f"promtool: {found.promtool}\nprometheus: {found.prometheus}\npushgateway: {found.pushgateway}")

"""The Python packages Spark executors need for Lakeline's Python code, packed to travel with the job.

On a cluster, executors run Python only for Lakeline's Kinesis source (a Python data source). Its third-party
packages (and what Spark's Python data source worker needs: pyarrow, pandas, numpy) are copied from the project's
venv into one archive, `.lakeline/executor-env/lakeline-env.tar.gz` (about 90 MB instead of the venv's 1.5 GB),
which a driver on a cluster master hands to Spark as `spark.archives` (ingest.spark). Each executor unpacks it into
its work dir as `lakeline_env/` and runs the base Python interpreter with that folder on its PYTHONPATH, so a
worker's Python needs none of the packages installed. Lakeline's own code travels beside it as a zip of `ingest/`
(`spark.submit.pyFiles`), made at each driver start, so it is always the driver's code. The interpreter is not
packed: workers need the same Python (3.11, at the same path as the driver's base interpreter), as in a container
image built from infra/ (docs/cluster.md, "Running on a cluster").

    python -m infra.executor_env [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import sysconfig
from pathlib import Path

from infra.paths import REPO_ROOT, executor_archive

# What the executors import: the Kinesis source's own chain (boto3, tenacity) and what Spark's Python data source
# worker needs (pyarrow, and pandas with numpy under it). Site-packages entries: packages, their dist-info, modules.
PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "dateutil", "python_dateutil", "six",
            "pyarrow", "numpy", "pandas", "pytz", "tzdata", "tenacity")


def _key(site: Path) -> str:
    """What the archive was made from: the lock, the interpreter and the package list."""
    lock = (REPO_ROOT / "infra" / "requirements.lock").read_bytes()
    parts = [lock, sys.version.encode(), str(site).encode(), ",".join(PACKAGES).encode()]
    return hashlib.sha256(b"\n".join(parts)).hexdigest()


def _entries(site: Path) -> list[Path]:
    found = []
    for name in PACKAGES:
        found += [p for pattern in (name, f"{name}.py", f"{name}-*.dist-info", f"{name}.libs")
                  for p in site.glob(pattern)]
    return sorted(set(found))


def build(force: bool = False) -> tuple[Path, str]:
    """Pack the executor packages if the archive is missing or was made from another lock (or `force`); returns
    (archive, what was done)."""
    import tarfile

    site = Path(sysconfig.get_paths()["purelib"])
    target, stamp = executor_archive(), executor_archive().with_suffix(".key")
    key = _key(site)
    if target.is_file() and stamp.is_file() and stamp.read_text() == key and not force:
        return target, "up to date"
    missing = [name for name in ("boto3", "pyarrow", "tenacity") if not (site / name).exists()]
    if missing:
        raise SystemExit(f"infra.executor_env: {', '.join(missing)} not in {site}: run it with the project's venv "
                         f"(.venv/bin/python) after `bash infra/setup.sh`")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with tarfile.open(partial, "w:gz", compresslevel=1) as archive:
        for entry in _entries(site):
            archive.add(entry, arcname=entry.name,
                        filter=lambda info: None if info.name.endswith((".pyc", "/__pycache__")) else info)
    partial.rename(target)
    stamp.write_text(key)
    return target, f"packed ({target.stat().st_size / 2**20:.0f} MB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.executor_env", description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="pack it again even if it is up to date")
    args = parser.parse_args(argv)
    archive, outcome = build(args.force)
    print(f"[setup] executor packages: {archive} ({outcome})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Resolve the pinned JVM jars from Maven Central into .lakeline/jars/<kind> (run by infra/setup.sh).

Each kind has a pom under infra/maven/<kind>/. Resolution is skipped when the folder's stamp matches the pom's
hash, so re-running set-up is fast. Spark connector jars that duplicate a jar pyspark already ships (same
artifact, any version) are dropped, so Spark never sees two versions of one library.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MAVEN_DIR = REPO_ROOT / "infra" / "maven"
KINDS = ("spark", "kafka")
_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")


def artifact_name(jar_file: str) -> str:
    """'jackson-core-2.13.5.jar' -> 'jackson-core'."""
    return _VERSION_SUFFIX.sub("", jar_file)


def _stamp(kind: str) -> str:
    digest = hashlib.sha256()
    for name in (MAVEN_DIR / kind / "pom.xml", MAVEN_DIR / "settings.xml"):
        digest.update(name.read_bytes())
    return digest.hexdigest()


def _pyspark_jar_names(python: str) -> set[str]:
    out = subprocess.run(
        [python, "-c", "import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    return {artifact_name(f) for f in os.listdir(out) if f.endswith(".jar")}


def resolve(kind: str, target: Path, python: str) -> None:
    stamp_file = target / ".stamp"
    if stamp_file.is_file() and stamp_file.read_text() == _stamp(kind):
        print(f"[setup] jars/{kind}: up to date ({len(list(target.glob('*.jar')))} jars)")
        return
    if shutil.which("mvn") is None:
        sys.exit("[setup] Maven (mvn) is not on PATH: install it (Debian: apt-get install -y maven) and re-run.")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    settings = os.environ.get("LAKELINE_MAVEN_SETTINGS", str(MAVEN_DIR / "settings.xml"))
    print(f"[setup] jars/{kind}: resolving from Maven Central (first run downloads several hundred MB)...",
          flush=True)
    cmd = ["mvn", "-B", "-q", "-s", settings, "-f", str(MAVEN_DIR / kind / "pom.xml"),
           "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:5]
        sys.exit(f"[setup] Maven could not resolve infra/maven/{kind}/pom.xml:\n" + "\n".join(errors))
    if kind == "spark":
        bundled = _pyspark_jar_names(python)
        for jar in staging.glob("*.jar"):
            if artifact_name(jar.name) in bundled:
                jar.unlink()
    (staging / ".stamp").write_text(_stamp(kind))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    print(f"[setup] jars/{kind}: {len(list(target.glob('*.jar')))} jars in {target}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the venv's python (to find pyspark's bundled jars)")
    parser.add_argument("--kind", choices=KINDS, action="append", help="resolve only this kind (repeatable)")
    args = parser.parse_args(argv)
    for kind in args.kind or KINDS:
        resolve(kind, REPO_ROOT / ".lakeline" / "jars" / kind, args.python)


if __name__ == "__main__":
    main()

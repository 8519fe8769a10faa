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
KINDS = ("spark", "kafka", "iceberg-rest")
OPTIONAL_KINDS = ("flink",)  # the Flink benchmark peer's jars: only with --kind flink (infra/flink.sh)
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


JVM_MODULE = REPO_ROOT / "jvm"
SPARK_RUNTIME_JAR = "lakeline-spark-runtime.jar"
_RETIRED_JARS = ("lakeline-delta-logstore.jar", ".logstore-stamp")  # the jar's name before jvm/ was a Maven module


def _pyspark_jars(python: str) -> Path:
    return Path(subprocess.run(
        [python, "-c", "import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))"],
        check=True, capture_output=True, text=True).stdout.strip())


def _compile_jar(source_dir: Path, classpath: list[str], target: Path, stamp: Path, kind: str, what: str) -> None:
    """Compile every .java under `source_dir` against `classpath` into the jar `target`; skipped when the sources
    have not changed since `stamp` was written."""
    import tempfile
    import zipfile

    sources = sorted(source_dir.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    if target.is_file() and stamp.is_file() and stamp.read_text() == digest:
        print(f"[setup] jars/{kind}: {target.name} up to date")
        return
    if shutil.which("javac") is None:
        sys.exit("[setup] javac not found: install a JDK 17+ (Debian: openjdk-17-jdk-headless) and re-run.")
    with tempfile.TemporaryDirectory() as out:
        result = subprocess.run(["javac", "-nowarn", "--release", "17", "-cp", os.pathsep.join(classpath), "-d", out,
                                 *map(str, sources)], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"[setup] could not compile {source_dir.relative_to(REPO_ROOT)}:\n{result.stderr[-2000:]}")
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: lakeline infra/setup.sh\n")
            for path in sorted(Path(out).rglob("*.class")):
                jar.write(path, path.relative_to(out).as_posix())
        partial.rename(target)
    stamp.write_text(digest)
    print(f"[setup] jars/{kind}: built {target.name} ({what})")


def _module_digest(settings: Path, pyspark_jars: Path) -> str:
    digest = hashlib.sha256(settings.read_bytes())
    digest.update("\n".join(sorted(os.listdir(pyspark_jars))).encode())  # a new pyspark: build and test again
    for path in sorted([JVM_MODULE / "pom.xml", *(p for p in (JVM_MODULE / "src").rglob("*") if p.is_file())]):
        digest.update(path.relative_to(JVM_MODULE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def failed_tests(maven_output: str) -> list[str]:
    """The JUnit tests Surefire names under 'Failures:' / 'Errors:' in Maven's output, e.g. 'RecordDecoderTest.x:42'."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", maven_output)
    named = re.findall(r"^\[ERROR\]\s{2,}(?:Run \d+: )?([\w$]+(?:Test|Tests)\.[\w$]+[^\s]*)", plain, re.MULTILINE)
    return list(dict.fromkeys(named))


def link_pyspark_jars(python: str) -> Path:
    """.lakeline/pyspark-jars -> the venv's pyspark jars: where jvm/pom.xml finds Spark's jars when run by hand."""
    jars, link = _pyspark_jars(python), REPO_ROOT / ".lakeline" / "pyspark-jars"
    if not (link.is_symlink() and link.resolve() == jars.resolve()):
        partial = link.with_name(link.name + ".partial")
        partial.unlink(missing_ok=True)
        partial.symlink_to(jars, target_is_directory=True)
        partial.replace(link)
    return jars


def build_spark_runtime(spark_dir: Path, pyspark_jars: Path) -> None:
    """Build and test Lakeline's JVM module (jvm/, see jvm/README.md): the conditional-put and fencing Delta LogStore,
    the direct-PUT checkpoint file manager for S3, the fencing Iceberg catalog, the strict one-pass JSON record
    decoder, the fixed-instant function and the SIGTERM hand-over to the Python driver, into
    <spark jars>/lakeline-spark-runtime.jar. Skipped when jvm/ has not changed since the last build."""
    settings = Path(os.environ.get("LAKELINE_MAVEN_SETTINGS", str(MAVEN_DIR / "settings.xml")))
    target, stamp = spark_dir / SPARK_RUNTIME_JAR, spark_dir / ".runtime-stamp"
    for retired in _RETIRED_JARS:  # Spark loads every jar of the folder: an old copy would shadow the new classes
        (spark_dir / retired).unlink(missing_ok=True)
    digest = _module_digest(settings, pyspark_jars)
    if target.is_file() and stamp.is_file() and stamp.read_text() == digest:
        print(f"[setup] jars/spark: {target.name} up to date")
        return
    print("[setup] jars/spark: building jvm/ (mvn package, JUnit tests included)...", flush=True)
    result = subprocess.run(["mvn", "-B", "-q", "-s", str(settings), "-f", str(JVM_MODULE / "pom.xml"),
                             f"-Dpyspark.jars={pyspark_jars}", "package"], capture_output=True, text=True)
    if result.returncode != 0:
        tests = failed_tests(result.stdout)
        if tests:
            sys.exit("[setup] JUnit tests of jvm/ failed: " + ", ".join(tests)
                     + "\n[setup] see them with: mvn -f jvm/pom.xml verify")
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:15]
        sys.exit("[setup] could not build jvm/ (mvn -f jvm/pom.xml package):\n" + "\n".join(errors))
    partial = target.with_suffix(".partial")
    shutil.copyfile(JVM_MODULE / "target" / SPARK_RUNTIME_JAR, partial)
    partial.replace(target)  # a new file, never a write into one hard-linked from another checkout
    stamp.unlink(missing_ok=True)
    stamp.write_text(digest)
    print(f"[setup] jars/spark: built {target.name} (JUnit tests passed)")


REST_LAUNCHER_SOURCE = REPO_ROOT / "infra" / "iceberg-rest"
REST_LAUNCHER_JAR = "lakeline-rest-launcher.jar"


def build_rest_launcher(rest_dir: Path, python: str) -> None:
    """Compile the loopback-only launcher of the Iceberg REST catalog fixture (infra/iceberg-rest) into
    <iceberg-rest jars>/lakeline-rest-launcher.jar, against the fixture's jars and pyspark's Hadoop client."""
    classpath = ([str(p) for p in rest_dir.glob("*.jar") if p.name != REST_LAUNCHER_JAR]
                 + [str(p) for p in _pyspark_jars(python).glob("hadoop-client-api-*.jar")])
    _compile_jar(REST_LAUNCHER_SOURCE, classpath, rest_dir / REST_LAUNCHER_JAR, rest_dir / ".launcher-stamp",
                 "iceberg-rest", "the REST catalog fixture on loopback only")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the venv's python (to find pyspark's bundled jars)")
    parser.add_argument("--kind", choices=KINDS + OPTIONAL_KINDS, action="append",
                        help=f"resolve only this kind (repeatable; default {', '.join(KINDS)})")
    args = parser.parse_args(argv)
    for kind in args.kind or KINDS:
        resolve(kind, REPO_ROOT / ".lakeline" / "jars" / kind, args.python)
        if kind == "spark":
            build_spark_runtime(REPO_ROOT / ".lakeline" / "jars" / kind, link_pyspark_jars(args.python))
        if kind == "iceberg-rest":
            build_rest_launcher(REPO_ROOT / ".lakeline" / "jars" / kind, args.python)


if __name__ == "__main__":
    main()

"""One config surface: every LAKELINE_* variable is read through ingest.settings, and docs/configuration.md's
table is the one the Settings model renders."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ingest.settings import Settings, child_env, settings_from, variable_name
from ingest.settings_table import DOC, render_page, settings_table

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("ingest", "maintenance", "lakeline", "dags")
ENV_LOOKUPS = {"get", "pop", "setdefault", "getenv"}


def _lakeline_name(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The LAKELINE_* variable `node` spells: a string, an f-string starting with one, or a module constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        text = str(node.values[0].value)
    elif isinstance(node, ast.Name):
        text = constants.get(node.id, "")
    else:
        return None
    return text if text.startswith("LAKELINE_") else None


def _is_os_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def lakeline_constants(source: str) -> dict[str, str]:
    """Module-level names bound to a string (CRASH_ENV = "LAKELINE_CRASH_AT")."""
    return {target.id: node.value.value for node in ast.parse(source).body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)}


def environment_uses(source: str, imported: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(line, variable) for each place `source` reads or writes a LAKELINE_* variable itself: os.environ / os.getenv
    lookups, `env.get("LAKELINE_...")` on any mapping, subscripts, `in os.environ`, and child environments built
    as {**os.environ, "LAKELINE_...": ...}. `imported`: constants of other modules, by name."""
    tree = ast.parse(source)
    constants = {**(imported or {}), **lakeline_constants(source)}
    found = []
    for node in ast.walk(tree):
        keys: list[ast.AST] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ENV_LOOKUPS:
            keys = node.args[:1]
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            keys = [node.left]
        elif isinstance(node, ast.Dict) and any(key is None and _is_os_environ(value)
                                                for key, value in zip(node.keys, node.values, strict=True)):
            keys = [k for k in node.keys if k is not None]
        found += [(node.lineno, name) for key in keys if (name := _lakeline_name(key, constants))]
    return found


def test_no_module_but_settings_reads_lakeline_variables_from_the_environment():
    paths = [path for folder in SCANNED for path in sorted((REPO / folder).rglob("*.py"))
             if path != REPO / "ingest" / "settings.py"]
    everywhere = {name: value for path in paths for name, value in lakeline_constants(path.read_text()).items()}
    offenders = [f"{path.relative_to(REPO)}:{line}: {name}" for path in paths
                 for line, name in environment_uses(path.read_text(), everywhere)]
    assert offenders == [], "read these through ingest.settings.Settings (child_env() for a child):\n" + \
        "\n".join(offenders)


@pytest.mark.parametrize("planted", [
    'import os\nx = os.environ.get("LAKELINE_HOST_ID")\n',
    'import os\nx = os.getenv("LAKELINE_HOST_ID", "h")\n',
    'import os\nHOST = "LAKELINE_HOST_ID"\nx = os.environ[HOST]\n',
    'import os\nos.environ["LAKELINE_LOG_FORMAT"] = "json"\n',
    'import os\nx = "LAKELINE_CRASH_AT" in os.environ\n',
    'import os\nenv = os.environ\nx = env.get("LAKELINE_TASK_LAUNCHER", "local")\n',
    'import os\nenv = {**os.environ, "LAKELINE_WAREHOUSE": "s3a://b/w"}\n',
    'import os\nkind = "spark"\nx = os.environ.get(f"LAKELINE_{kind.upper()}_JARS_DIR")\n',
])
def test_the_scan_finds_each_way_of_reading_one(planted):
    assert environment_uses(planted)


def test_the_scan_resolves_a_constant_imported_from_another_module():
    assert environment_uses('import os\nfrom ingest.spark import ARCHIVE\nx = os.environ.get(ARCHIVE, "")\n',
                            {"ARCHIVE": "LAKELINE_CLASS_ARCHIVE"}) == [(3, "LAKELINE_CLASS_ARCHIVE")]


def test_the_scan_leaves_other_variables_alone():
    assert environment_uses('import os\nx = os.environ.get("JAVA_HOME")\nos.environ["PYSPARK_PYTHON"] = "p"\n') == []


def test_every_field_is_described():
    assert [name for name, info in Settings.model_fields.items() if not info.description] == []


def test_the_docs_table_is_the_one_the_model_renders():
    page = DOC.read_text()
    assert settings_table() in page, "docs/configuration.md is stale: run `python -m ingest.settings_table`"
    assert render_page(page) == page
    for field in Settings.model_fields:
        if field != "kafka_options":
            assert f"`{variable_name(field)}`" in page


def test_settings_from_reads_only_the_mapping_given(monkeypatch):
    monkeypatch.setenv("LAKELINE_SPARK_MASTER", "local[3]")
    settings = settings_from({"LAKELINE_TASK_LAUNCHER": "spark-submit", "AWS_DEFAULT_REGION": "eu-west-1",
                              "LAKELINE_KAFKA_OPT_SASL_MECHANISM": "PLAIN"})
    assert (settings.task_launcher, settings.spark_master, settings.aws_region) == ("spark-submit", "local[2]",
                                                                                    "eu-west-1")
    assert "spark_master" not in settings.model_fields_set
    assert settings.kafka_client_properties() == {"sasl.mechanism": "PLAIN"}


def test_child_env_renders_overrides_and_removes_none(monkeypatch):
    monkeypatch.setenv("LAKELINE_CRASH_AT", "after-table-commit@1")
    env = child_env(warehouse="s3a://b/w", spark_jars_on_workers=True, crash_at=None)
    assert env["LAKELINE_WAREHOUSE"] == "s3a://b/w" and env["LAKELINE_SPARK_JARS_ON_WORKERS"] == "true"
    assert "LAKELINE_CRASH_AT" not in env
    with pytest.raises(TypeError, match="not Settings fields: wearhouse"):
        child_env(wearhouse="s3a://b/w")

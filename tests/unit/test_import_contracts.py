"""The import rules of ARCHITECTURE.md hold (import-linter contracts in pyproject.toml), and the check is real: a
forbidden import added to a copy of the code breaks it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("lakeline", "maintenance", "ingest", "infra", "bench")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    # A fresh interpreter with `root` first on sys.path, so a copy's packages shadow the installed ones.
    code = "import sys; sys.path.insert(0, sys.argv[1]); from importlinter.cli import lint_imports_command; " \
           "sys.argv = ['lint-imports', '--config', sys.argv[2]]; lint_imports_command()"
    return subprocess.run([sys.executable, "-c", code, str(root), str(root / "pyproject.toml")], cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_are_kept():
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" not in result.stdout.lower().replace("0 broken", ""), result.stdout


def test_a_forbidden_import_breaks_the_contracts(tmp_path):
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "results"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    commits = tmp_path / "ingest" / "commits.py"
    commits.write_text(commits.read_text() + "\nfrom maintenance import policy  # noqa: E402,F401\n")
    adapter = tmp_path / "ingest" / "adapters" / "hadoop_fs.py"  # and, inside ingest, an import that points up
    adapter.write_text(adapter.read_text() + "\nfrom ingest.formats import format_for  # noqa: E402,F401\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "ingest.commits -> maintenance.policy" in result.stdout, result.stdout
    assert "ingest.adapters.hadoop_fs -> ingest.formats" in result.stdout, result.stdout


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:  # statements at module level only (and under `if TYPE_CHECKING:` / try)
        nodes = [node] + (list(ast.walk(node)) if isinstance(node, ast.If | ast.Try) else [])
        for item in nodes:
            if isinstance(item, ast.Import):
                found |= {alias.name.split(".")[0] for alias in item.names}
            elif isinstance(item, ast.ImportFrom) and item.module and item.level == 0:
                found.add(item.module.split(".")[0])
    return found


def test_library_code_imports_infra_only_inside_functions():
    """The contracts let ingest/maintenance reach infra.paths lazily; at module level they never import infra."""
    offenders = [str(path.relative_to(REPO)) for package in ("ingest", "maintenance")
                 for path in (REPO / package).rglob("*.py") if "infra" in _module_level_imports(path)]
    assert offenders == []

"""The docs a newcomer reads hold together: every relative link (and #anchor, GitHub's heading slugs) resolves,
every command of the README's tour exists (it answers `--help`), and the README stays short."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
TOUR_HEADING = "## A five-minute tour"

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")


def doc_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md",
             REPO / "bench" / "results" / "README.md"]
    files += sorted((REPO / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked out."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, CODE_SPAN.sub("", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `_`, `-` and spaces kept),
    spaces to hyphens. Markup goes first: code ticks, emphasis, a link's target."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs (a repeated slug gets -1, -2, ... as on GitHub)
    and explicit `<a name=...>` / `id=...` anchors."""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO)}:{number}: {target}"
            if not resolved.exists():
                problems.append(f"{where} (no such file)")
                continue
            if anchor:
                if resolved.is_dir() or resolved.suffix != ".md":
                    problems.append(f"{where} (an anchor into something that is not Markdown)")
                elif anchor not in anchors(resolved):
                    problems.append(f"{where} (no heading with that anchor in {resolved.relative_to(REPO)})")
    return problems


def tour_commands() -> list[tuple[str, ...]]:
    """The distinct `lakeline <subcommand ...>` of the README tour's code blocks: the words after `lakeline`
    up to the first option."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(TOUR_HEADING)
    end = text.find("\n## ", start + len(TOUR_HEADING))
    section = text[start:end if end >= 0 else None]
    commands: list[tuple[str, ...]] = []
    fenced = False
    for line in section.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            continue
        words = line.split()
        for i, word in enumerate(words):
            if word == "lakeline" or word.endswith("/lakeline"):
                sub = []
                for token in words[i + 1:]:
                    if token.startswith("-") or token in {"#", "|", "&&", ";"}:
                        break
                    sub.append(token)
                if tuple(sub) not in commands:
                    commands.append(tuple(sub))
                break
    return commands


def test_every_relative_link_and_anchor_resolves():
    files = doc_files()
    assert len(files) >= 10, [str(f) for f in files]
    problems = [problem for path in files for problem in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    """The check is real: a missing file and a missing anchor are both reported."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Some `code`: here\n\nsee [b](b.md), [ok](#some-code-here), "
                                   "[bad](#nowhere), `[in code](x.md)`\n\n```\n[fenced](y.md)\n```\n")
    problems = broken_links(tmp_path / "a.md")
    assert len(problems) == 2, problems
    assert "b.md (no such file)" in problems[0] and "#nowhere" in problems[1]


def test_slugs_match_github():
    assert slug("One driver per pipeline, across hosts: the host lock, the lease and the fence") == \
        "one-driver-per-pipeline-across-hosts-the-host-lock-the-lease-and-the-fence"
    assert slug("`lakeline/`: the command") == "lakeline-the-command"
    assert slug("Table maintenance policy (conf/tables/*.yaml)") == "table-maintenance-policy-conftablesyaml"


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_keeps_the_two_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "bash infra/demo.sh" in text and "bash infra/test.sh" in text
    assert "bash infra/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_tour_commands_answer_help():
    commands = tour_commands()
    assert len(commands) >= 5, commands
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    failures = []
    for sub in commands:
        result = subprocess.run([sys.executable, "-m", "lakeline", *sub, "--help"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0 or "usage: lakeline" not in result.stdout:
            failures.append(f"lakeline {' '.join(sub)} --help: exit {result.returncode}\n{result.stderr[-2000:]}")
    assert not failures, "\n".join(failures)


def test_no_dated_measurements_in_the_docs():
    """Dated measurements belong in CHANGELOG.md and bench/results/, not in the docs that state behaviour."""
    dated = re.compile(r"(measured|timed|took)[^.]{0,80}\b20\d\d-\d\d-\d\d\b|\b20\d\d-\d\d-\d\d\b[^.]{0,40}measured")
    files = [f for f in doc_files() if f.name != "CHANGELOG.md" and "results" not in f.parts]
    offenders = [f"{f.relative_to(REPO)}:{n}" for f in files for n, line in enumerate(f.read_text().splitlines(), 1)
                 if dated.search(line)]
    assert not offenders, offenders

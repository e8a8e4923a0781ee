"""The documentation holds together: README.md is a short front page carrying the two commands CI and
new users run verbatim, docs/cli.md is what `--help` says today, and every relative link in README.md
and docs/*.md names a file (and a heading) that exists. No network, no subprocess."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_CHARS = 12_000
COMMANDS = (  # run by .ci/run and by new users: each alone on its line in a ```bash block
    "python3 -m venv .venv && .venv/bin/pip install '.[demo]' torch==2.13.0 && .venv/bin/diagnose demo",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest",
)
PAGES = sorted(DOCS.glob("*.md"))
MARKDOWN = [README, *PAGES]

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
CODE_SPAN = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a fence's own lines dropped)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(info string, lines) of each fenced code block."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if FENCE.match(line):
            if current is None:
                current = []
                blocks.append((line.strip().strip("`~").strip(), current))
            else:
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link markup and punctuation dropped, lowercase, spaces to '-'."""
    text = INLINE_LINK.sub(r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Link targets outside code (fences and inline code spans), in order."""
    prose = "\n".join(prose_lines(path.read_text(encoding="utf-8")))
    return LINK.findall(CODE_SPAN.sub("code", prose))


def load_generator():
    spec = importlib.util.spec_from_file_location("generate_cli_reference", DOCS / "generate_cli_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_what_help_says_today():
    generator = load_generator()
    expected = generator.render(generator.main_group())
    current = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert current == expected, (
        "docs/cli.md is out of date with the CLI's --help: run `python docs/generate_cli_reference.py` "
        "and commit docs/cli.md")


def test_readme_is_a_short_front_page_with_both_commands_verbatim():
    text = README.read_text(encoding="utf-8")
    assert len(text) <= README_MAX_CHARS, (
        f"README.md is {len(text):,} characters, over {README_MAX_CHARS:,}: move detail to a docs/ page")
    bash_lines = [line for info, lines in fenced_blocks(text) if info == "bash" for line in lines]
    for command in COMMANDS:
        assert command in bash_lines, f"README.md must hold, alone on its line in a ```bash block: {command}"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_name_existing_files_and_headings(path: Path):
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"broken links in {path.relative_to(REPO)}: " + "; ".join(broken)


def test_every_docs_page_has_content_and_is_linked_from_the_front_page():
    assert PAGES, "docs/ holds no page"
    front = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    for page in PAGES:
        lines = [ln for ln in page.read_text(encoding="utf-8").splitlines() if ln.strip()]
        assert lines and lines[0].startswith("# "), f"{page.name} must start with a # title"
        assert len(lines) > 1, f"{page.name} has a title and nothing else"
        assert page.resolve() in front, f"README.md links to no docs/{page.name}"


def test_the_slug_rules_are_githubs():
    assert slug("Accuracy (benchmarks/accuracy.py)") == "accuracy-benchmarksaccuracypy"
    assert slug("Export: OTLP metrics and logs, Prometheus") == "export-otlp-metrics-and-logs-prometheus"
    assert slug("Example report (excerpt, `diagnose demo --duration 30` on a 2-core VM)") == (
        "example-report-excerpt-diagnose-demo---duration-30-on-a-2-core-vm")
    assert slug("diagnose run_x") == "diagnose-run_x"

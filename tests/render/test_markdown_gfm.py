"""report.md through GitHub's own renderer (cmark-gfm): names taken from the target render as
written and inject nothing; the default report stays ticket-sized with the verdict first."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diagnose.pipeline import analyse
from diagnose.render import render
from diagnose.render.markdown.gfm import code, fenced, text
from diagnose.render.markdown.report import MAX_CHARS
from diagnose.render.units import bound_words
from helpers import REPO, gfm_html, gfm_text

HOSTILE = ["compute.<locals>.step", "/proc/<pid>/task", "__init__", "a|b", "<img src=x onerror=alert(1)>",
           "[click](https://evil.example)", "**bold**", "~~gone~~", "&amp;", "# Verdict: fake", "`tick`",
           "back\\slash", "www.evil.example", "https://evil.example/x"]


@pytest.mark.parametrize("name", HOSTILE)
def test_text_renders_as_written_in_a_table_cell(name):
    html = gfm_html(f"| a |\n|---|\n| {text(name)} |\n")
    assert "<img" not in html and "<a " not in html and "<strong>" not in html and "<del>" not in html
    assert gfm_text(f"| a |\n|---|\n| {text(name)} |\n").strip().endswith(name.replace("\n", " "))


def test_code_spans_and_fences_hold_any_backticks():
    assert gfm_text(code("x`y``z")).strip() == "x`y``z"
    block = "\n".join(fenced(["```", "not closed", "``` still inside"]))
    assert gfm_html(block).count("<pre>") == 1 and "still inside" in gfm_text(block)


def test_mentions_do_not_ping():
    assert "@octocat" not in gfm_text(text("@octocat"))  # a word joiner after the @
    assert gfm_text(text("@octocat")).replace("\u2060", "").strip() == "@octocat"


def _hostile_bundle(tmp_path: Path) -> Path:
    """The service fixture with the target's names replaced by markup: frames, threads, cmdline."""
    src = REPO / "fixtures" / "cpu" / "service-json"
    b = tmp_path / "b"
    shutil.copytree(src, b, ignore=shutil.ignore_patterns("findings.json", "report.md"))
    m = json.loads((b / "manifest.json").read_text())
    m["target"]["cmdline"] = ["python", "<script>alert(1)</script>", "|", "@admin", "__main__"]
    m["target"]["pid"] = "1 [click](https://evil.example) ![t](https://evil.example/t.png) @admin"  # break-it
    (b / "manifest.json").write_text(json.dumps(m))
    win = next((b / "pyspy").glob("*.json"))
    events = json.loads(win.read_text())
    for ev in events:
        if ev.get("args", {}).get("filename"):
            ev["name"] = "compute.<locals>.step|__init__<b>x</b>"
        elif str(ev.get("name", "")).startswith("thread ("):
            ev["name"] = ev["name"].split(")")[0] + ") <img src=x onerror=alert(1)>"
    win.write_text(json.dumps(events))
    return b


@pytest.mark.parametrize("fmt", ["md", "md-full"])
def test_the_report_of_a_hostile_target_renders_its_names_as_text(fmt, tmp_path):
    md = render(analyse(_hostile_bundle(tmp_path)), fmt)
    html = gfm_html(md)
    assert "<script>" not in html and "<img" not in html and "<b>" not in html and "<a " not in html
    assert md.startswith("# ") and ": pid ? (" in md.split("\n", 1)[0]  # a pid that is not one is not shown
    seen = gfm_text(md)
    assert "<script>alert(1)</script>" in seen and "compute.<locals>.step|__init__<b>x</b>" in seen
    assert "@\u2060admin" in seen
    assert sum(1 for ln in md.splitlines() if ln.startswith("# ")) == 1  # one title, no injected heading


@pytest.mark.parametrize("fixture", ["cpu/service-json", "cpu/io-socket", "gpu/service-tiny-kernels"])
def test_the_default_report_is_ticket_sized_with_the_verdict_first(fixture):
    rep = analyse(REPO / "fixtures" / fixture)
    md, full = render(rep, "md"), render(rep, "md-full")
    assert len(md) <= MAX_CHARS < len(full) or len(full) <= MAX_CHARS
    first = md.split("\n", 1)[0]
    v = rep.verdict
    assert first.startswith(f"# {bound_words(v.quadrant.value)}")
    assert f"pid {rep.manifest['target']['pid']}" in first
    assert len(first) < 160  # a ticket title

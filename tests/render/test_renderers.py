"""The same checks over every registered renderer."""
from __future__ import annotations

import json

import pytest

from diagnose.pipeline import analyse
from diagnose.render import RENDERERS, UnknownFormat, render
from helpers import REPO, gfm_html, gfm_text, is_report

BUNDLE = REPO / "fixtures" / "cpu" / "service-json"


@pytest.fixture(scope="module")
def report():
    return analyse(BUNDLE)


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_renderer_declares_itself_and_shows_the_hot_function(fmt, report):
    r = RENDERERS[fmt]()
    assert r.format == fmt and r.extension.startswith(".") and r.title and r.description
    body = r.render(report)
    assert isinstance(body, bytes) == r.binary and body
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    assert "serialize_payloads" in text  # the fixture's hot function, whatever the format
    assert r.render(report) == body  # pure: the same Report renders the same document


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_documents_state_verdict_evidence_and_collectors(fmt, report):
    text = str(render(report, fmt))
    text = gfm_text(text) if fmt == "md" else text  # what a reader of the rendered ticket sees
    assert "service" in text
    assert "cpu.category_share_pct[serialization]" in text
    assert "pyspy" in text and "process" in text


def test_json_renderer_round_trips(report):
    doc = json.loads(render(report, "json"))
    assert doc["verdict"]["quadrant"] == "service"
    assert doc["target"]["pid"] == report.manifest["target"]["pid"]


def test_an_unknown_format_names_the_registered_ones(report):
    with pytest.raises(UnknownFormat) as err:
        render(report, "pdf")
    assert "'pdf'" in str(err.value) and all(fmt in str(err.value) for fmt in RENDERERS)


def test_markdown_has_the_ticket_sections(report):
    md, full = render(report, "md"), render(report, "md-full")
    assert is_report(md) and md.startswith("# Service-bound, act on the service layer: pid ")
    for heading in ("## Where the time went", "## Key metrics", "## Findings", "## Top stacks", "## Could not judge",
                    "## Environment", "## Reproduce"):
        assert heading in md and heading in full
    for heading in ("## Threads", "## Signals", "## Collectors and data quality"):
        assert heading not in md and heading in full
    assert "diagnose attach" in md.split("## Reproduce")[1]
    assert "pyspy error ratio" in full
    assert md.index("## Where the time went") < md.index("## Key metrics") < md.index("## Findings")


FIXTURE_BUNDLES = sorted(p.parent for p in (REPO / "fixtures").glob("*/*/manifest.json"))


@pytest.fixture(scope="module", params=FIXTURE_BUNDLES, ids=[f"{p.parent.name}/{p.name}" for p in FIXTURE_BUNDLES])
def fixture_report(request):
    return analyse(request.param)


def test_every_renderer_on_every_fixture_bundle(fixture_report):
    """Every registered renderer on every recorded bundle: a document, the same one twice, and valid
    by its format's own check (GFM ticket title and size, the findings schema, the Trace Event Format
    checker, speedscope's schema where fetched)."""
    import jsonschema
    from render.test_speedscope import SCHEMA
    from render.trace_event_format import check_trace

    from diagnose.render.findings_json import findings_schema
    from diagnose.render.markdown.report import MAX_CHARS

    quadrant = fixture_report.analysis.verdict.quadrant.value
    for fmt, cls in sorted(RENDERERS.items()):
        body = cls().render(fixture_report)
        assert body and cls().render(fixture_report) == body, fmt
        text = body.decode() if isinstance(body, bytes) else body
        if fmt == "md":
            first = text.split("\n", 1)[0]
            assert is_report(text) and len(text) <= MAX_CHARS, (len(text), first)
            assert quadrant.replace("_", " ") in first.lower() or "no verdict" in first.lower(), first
            title = gfm_text(first).strip()  # as a reader sees it: every escape consumed, nothing injected
            assert gfm_html(first).startswith("<h1>") and "\\" not in title and title.split(":")[0] in first, title
        elif fmt == "md-full":
            assert is_report(text) and "## Signals" in text
        elif fmt == "json":
            jsonschema.validate(json.loads(text), findings_schema())
            assert json.loads(text)["verdict"]["quadrant"] == quadrant
        elif fmt == "perfetto":
            assert check_trace(json.loads(text)) == []
        elif fmt == "speedscope" and SCHEMA.is_file():
            jsonschema.validate(json.loads(text), json.loads(SCHEMA.read_text()))
        else:
            assert fmt in ("speedscope",), f"{fmt}: a renderer this test does not check yet"

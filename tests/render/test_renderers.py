"""The same checks over every registered renderer."""
from __future__ import annotations

import json

import pytest

from diagnose.pipeline import analyse
from diagnose.render import RENDERERS, UnknownFormat, render
from helpers import REPO, gfm_text, is_report

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

"""The same checks over every registered renderer."""
from __future__ import annotations

import json

import pytest

from diagnose.pipeline import analyse
from diagnose.render import RENDERERS, UnknownFormat, render
from helpers import REPO

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
    md = render(report, "md")
    for heading in ("# diagnose report", "## Findings", "## Top stacks", "## Threads",
                    "## Collectors and data quality", "## Reproduce", "## Could not judge"):
        assert heading in md
    assert "diagnose attach" in md.split("## Reproduce")[1]
    assert "pyspy error ratio" in md

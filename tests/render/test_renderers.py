"""The same checks over every registered renderer."""
from __future__ import annotations

import json

import pytest

from diagnose.verdict.analyze import analyze
from diagnose.bundle import Bundle
from diagnose.render import RENDERERS
from helpers import REPO

BUNDLE = REPO / "fixtures" / "cpu" / "service-json"


@pytest.fixture(scope="module")
def analysis_and_manifest():
    b = Bundle.open(BUNDLE)
    return analyze(b), b.manifest


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_renderer_states_verdict_evidence_and_collectors(fmt, analysis_and_manifest):
    a, manifest = analysis_and_manifest
    r = RENDERERS[fmt]()
    assert r.format == fmt and r.extension.startswith(".")
    text = r.render(a, manifest)
    assert "service" in text
    assert "cpu.category_share_pct[serialization]" in text
    assert "pyspy" in text and "process" in text
    assert "serialize_payloads" in text


def test_json_renderer_round_trips(analysis_and_manifest):
    a, manifest = analysis_and_manifest
    doc = json.loads(RENDERERS["json"]().render(a, manifest))
    assert doc["verdict"]["quadrant"] == "service"
    assert doc["target"]["pid"] == manifest["target"]["pid"]


def test_markdown_has_the_ticket_sections(analysis_and_manifest):
    a, manifest = analysis_and_manifest
    md = RENDERERS["md"]().render(a, manifest)
    for heading in ("# diagnose report", "## Findings", "## Top stacks", "## Threads",
                    "## Collectors and data quality", "## Reproduce", "## Could not judge"):
        assert heading in md
    assert "diagnose attach" in md.split("## Reproduce")[1]
    assert "pyspy error ratio" in md

"""findings.json against its shipped JSON Schema (diagnose/render/findings-v1.schema.json), for
every fixture bundle and every shared real trace; the shipped schema is the one generated from the
types (diagnose/render/findings_schema.py)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from diagnose.bundle.importers import import_files
from diagnose.pipeline import analyse
from diagnose.render import render
from diagnose.render.findings_json import findings_schema
from diagnose.render.findings_schema import SHIPPED, schema_text
from helpers import REPO, SHARED_DATA

BUNDLES = sorted(p.parent for p in (REPO / "fixtures").glob("*/*/manifest.json"))
TRACES = sorted((SHARED_DATA / "torch-traces").glob("*.json*")) if (SHARED_DATA / "torch-traces").is_dir() else []


def _validator() -> jsonschema.Draft202012Validator:
    schema = findings_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("bundle", BUNDLES, ids=[f"{p.parent.name}/{p.name}" for p in BUNDLES])
def test_every_fixture_validates(bundle):
    doc = json.loads(render(analyse(bundle), "json"))
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_every_shared_trace_validates(tmp_path):
    if not TRACES:
        pytest.skip("../shared/data/torch-traces is absent")
    v = _validator()
    for i, path in enumerate(TRACES):
        doc = json.loads(render(analyse(import_files([path], tmp_path / str(i))), "json"))
        errors = list(v.iter_errors(doc))
        assert not errors, (path.name, [f"{list(e.path)}: {e.message}" for e in errors[:5]])


def test_the_schema_catches_a_broken_document():
    doc = json.loads(render(analyse(BUNDLES[0]), "json"))
    doc["verdict"]["quadrant"] = "fast"
    del doc["account"]
    assert len(list(_validator().iter_errors(doc))) == 2


def test_the_shipped_schema_is_the_generated_one():
    """data_quality and details are generated from their msgspec types: a changed type needs
    ``python -m diagnose.render.findings_schema`` (and, for a key renamed or removed, a new version)."""
    assert SHIPPED.read_text(encoding="utf-8") == schema_text(), "run: python -m diagnose.render.findings_schema"


def test_the_typed_sections_are_checked():
    doc = json.loads(render(analyse(BUNDLES[0]), "json"))
    doc["details"]["top_functions"] = [{"function": "f", "self_pct": "a lot", "total_pct": 1.0}]
    doc["data_quality"]["pyspy"] = {"windows": -1.5}
    paths = sorted(tuple(e.path) for e in _validator().iter_errors(doc))
    assert paths == [("data_quality", "pyspy"), ("details", "top_functions", 0, "self_pct")], paths  # pyspy: anyOf

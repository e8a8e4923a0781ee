"""signals -> rules -> verdict on the project's own recorded bundles (fixtures/cpu)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.model import Quadrant
from diagnose.verdict.analyze import analyze
from helpers import REPO

FIXTURES = sorted((REPO / "fixtures" / "cpu").glob("*/expected.json"))


@pytest.fixture(params=[p.parent for p in FIXTURES], ids=[p.parent.name for p in FIXTURES])
def fixture_bundle(request) -> tuple[Bundle, dict]:
    path: Path = request.param
    return Bundle.open(path), json.loads((path / "expected.json").read_text())


def test_fixtures_exist():
    assert {p.parent.name for p in FIXTURES} >= {"service-json", "io-socket", "compute-torch"}


def test_verdict_matches_recording(fixture_bundle):
    bundle, expected = fixture_bundle
    a = analyze(bundle)
    assert a.verdict.quadrant == Quadrant(expected["quadrant"])
    assert a.verdict.scores[a.verdict.quadrant] == max(a.verdict.scores.values())
    assert any(expected["hot_function"] in fr for s in a.top_stacks for fr in s.frames)
    lead = [f for f in a.findings if f.quadrant == a.verdict.quadrant][0]
    assert lead.evidence and all(e.unit and e.source for e in lead.evidence)


def test_findings_json_shape(fixture_bundle):
    doc = analyze(fixture_bundle[0]).to_json()
    v = doc["verdict"]
    assert v["quadrant"] in {"compute", "bandwidth", "service", "io", "unknown"}
    assert v["layer"] in {"model", "engine", "service", "system"}
    assert set(v["scores"]) == {"compute", "bandwidth", "service", "io"}
    assert all(0.0 <= s <= 1.0 for s in v["scores"].values()) and 0 < v["confidence"] <= 1
    for f in doc["findings"]:
        assert set(f) >= {"rule_id", "quadrant", "layer", "severity", "confidence", "evidence", "suggestions"}
        for e in f["evidence"]:
            assert set(e) >= {"signal", "value", "unit", "threshold", "source"}
    for name, s in doc["signals"].items():
        assert set(s) >= {"value", "unit", "source"}
        assert s["value"] is not None or s.get("reason"), name
    assert any("GPU" in n["what"] for n in doc["not_judged"])


def test_missing_py_spy_stream_is_unknown_not_zero(tmp_path):
    src = REPO / "fixtures" / "cpu" / "service-json"
    dst = tmp_path / "b"
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "pyspy")
    (dst / "pyspy.jsonl").unlink()
    a = analyze(Bundle.open(dst))
    s = a.signals["cpu.category_share_pct[serialization]"]
    assert s.value is None and s.reason
    assert a.signals["cpu.process_util_pct"].value > 50  # the process stream still counts


def test_torn_last_line_is_skipped_and_counted(tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(REPO / "fixtures" / "cpu" / "service-json", dst)
    with open(dst / "process.jsonl", "a") as fh:
        fh.write('{"t_ns": 12, "cpu_us')
    a = analyze(Bundle.open(dst))
    assert a.data_quality.streams.torn_lines == {"process.jsonl": 1}
    assert a.verdict.quadrant == Quadrant.SERVICE


def test_threshold_override_changes_the_findings_not_the_account():
    """Thresholds decide which rules fire (findings and remedies); the quadrant is read from the
    time account, which thresholds do not move."""
    bundle = Bundle.open(REPO / "fixtures" / "cpu" / "service-json")
    overrides = {"service.serialization:cpu.category_share_pct[serialization]": 101.0,
                 "service.gil_bound:cpu.python_busy_pct": 101.0,
                 "service.python_overhead:cpu.category_share_pct[python]": 101.0}
    default, a = analyze(bundle), analyze(bundle, overrides)
    assert "service.serialization" in {f.rule_id for f in default.findings}
    assert "service.serialization" not in {f.rule_id for f in a.findings}
    assert a.verdict.quadrant == default.verdict.quadrant == Quadrant.SERVICE
    assert a.verdict.headline != default.verdict.headline  # the lead rule's summary is gone
    assert a.data_quality.analysis.threshold_overrides == overrides
    from diagnose.verdict.evaluate import ThresholdError

    with pytest.raises(ThresholdError):
        analyze(bundle, {"no.such:rule": 1.0})

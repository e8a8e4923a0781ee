"""A torch window still exporting when attach stopped waiting (collectors/agent.py) is said in the
report: its trace never arrived, or it arrived later and the report now includes it."""
from __future__ import annotations

import json
import shutil

from diagnose.pipeline import analyse
from helpers import REPO

BUNDLE = REPO / "fixtures" / "cpu" / "compute-torch"
TRACE = REPO / "fixtures" / "torch" / "h200-train-step" / "trace.json.gz"


def _bundle(tmp_path, pending: bool):
    b = tmp_path / "b"
    shutil.copytree(BUNDLE, b)
    m = json.loads((b / "manifest.json").read_text())
    m["collectors"].append({"name": "agent", "state": "partial", "reason": "the agent was still exporting",
                            "counts": {"torch_traces": 0, "torch_export_pending": pending},
                            "streams": ["torch.jsonl", "torch/"]})
    (b / "manifest.json").write_text(json.dumps(m))
    return b


def _late(report) -> list[str]:
    return [w.text for w in report.analysis.data_quality.warnings
            if "torch" in w.text and "agent" in w.collectors]


def test_a_trace_still_exporting_and_never_arrived_is_said(tmp_path):
    (said,) = _late(analyse(_bundle(tmp_path, True)))
    assert "has not arrived" in said


def test_a_trace_that_arrived_after_the_first_report_is_said_and_included(tmp_path):
    b = _bundle(tmp_path, True)
    (b / "torch").mkdir()
    shutil.copy(TRACE, b / "torch" / "trace-1.json.gz")
    report = analyse(b)
    (said,) = _late(report)
    assert "arrived after" in said and "includes it" in said
    assert report.analysis.data_quality.torch.traces == 1


def test_nothing_is_said_when_attach_did_not_give_up(tmp_path):
    assert _late(analyse(_bundle(tmp_path, False))) == []

"""Issue 16: spans the agent drops (its queue full) are stated, and request statistics are computed
over the part of the window the kept spans cover, not the whole window (where a target ending
~35k spans/s showed 205-374 QPS instead of ~9-18k, with no warning)."""
from __future__ import annotations

import json

from agent_helpers import service  # noqa: F401  (fixture)
from helpers import findings, only_bundle, run_diagnose


def _served_per_s(count_file, lo_ns: int, hi_ns: int) -> float:
    """The target's own count of spans ended per second between two times (its 0.1 s notes)."""
    rows = [tuple(map(int, ln.split())) for ln in count_file.read_text().splitlines() if ln.strip()]
    inside = [r for r in rows if lo_ns <= r[0] <= hi_ns]
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / ((t1 - t0) / 1e9)


def test_dropped_spans_are_stated_and_qps_is_over_the_covered_part(service, tmp_path):  # noqa: F811
    counts_file = tmp_path / "served.txt"
    # the agent's sampling off (--span-share): this test is about the queue overflowing
    svc = service("--rate", "3000", "--queue", "300", "--span-share", "100", "--count-file", str(counts_file),
                  workload="span_flood")
    res = run_diagnose("attach", str(svc.pid), "--duration", "2", "--torch-window", "0", "--out",
                       str(tmp_path / "out"), "--no-tui", timeout=150)
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path / "out")
    manifest = json.loads((bundle / "manifest.json").read_text())
    agent = {c["name"]: c for c in manifest["collectors"]}["agent"]["counts"]
    assert agent["spans_dropped"] > 0 and agent["spans_dropped_ranges_ns"], agent
    lo, hi = agent["spans_window_ns"]
    assert manifest["started_ns"] <= lo < hi <= manifest["ended_ns"]
    assert agent["spans_first_start_ns"] >= lo - 10**9 and agent["spans_last_end_ns"] <= hi

    doc = findings(bundle)
    cov = doc["data_quality"]["spans"]["coverage"]
    assert cov["spans_dropped"] == agent["spans_dropped"] and cov["covered_share_pct"] < 90, cov
    served = _served_per_s(counts_file, lo, hi)
    qps = doc["signals"]["spans.qps"]["value"]
    requests = doc["signals"]["spans.requests"]["value"]
    assert requests / ((hi - lo) / 1e9) < 0.8 * served  # over the whole window: the old, wrong figure
    assert 0.7 * served <= qps <= 1.3 * served, (qps, served, cov)
    assert "covered part" in doc["signals"]["spans.qps"]["source"]
    [warning] = [w for w in doc["data_quality"]["warnings"] if "spans were dropped" in w["text"]]
    assert warning["collectors"] == ["agent"]
    report = (bundle / "report.md").read_text()
    assert "**Data quality:**" in report and "spans were dropped" in report.split("## Where the time went")[0]
    assert "data quality: " in res.stdout and "spans were dropped" in res.stdout

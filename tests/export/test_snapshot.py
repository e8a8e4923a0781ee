"""What an export sends, built from real bundles: key metrics in OTel units (ms -> s, % -> 1),
service.name from the spans, diagnose's cost, the findings, rank from a torch trace; what was not
measured (or is not a number) is left out, never sent as 0."""
from __future__ import annotations

import json
import math
import shutil

import pytest

from diagnose.bundle.importers import import_files
from diagnose.export.snapshot import snapshot
from diagnose.pipeline import analyse
from helpers import REPO


def _points(snap) -> dict:
    return {(p.name, p.attributes): (p.value, p.unit) for p in snap.points}


def test_key_metrics_verdict_shares_cost_and_findings(served_report):
    snap = snapshot(served_report)
    pts = _points(snap)
    sig = served_report.analysis.signals
    p99 = sig["spans.p99_ms"].value / 1e3
    assert pts[("diagnose.request.duration", (("percentile", "p99"),))] == (pytest.approx(p99), "s")
    assert pts[("diagnose.request.duration", (("percentile", "p50"),))][0] == pytest.approx(0.0595)  # 10..109 ms
    assert pts[("diagnose.request.rate", ())] == (pytest.approx(sig["spans.qps"].value), "{request}/s")
    assert pts[("diagnose.gen_ai.time_to_first_token", (("percentile", "p99"),))] == (pytest.approx(0.004), "s")
    assert ("diagnose.gen_ai.time_per_output_token", (("percentile", "p50"),)) in pts
    assert pts[("diagnose.capture.cpu.time", (("process", "diagnose"),))] == (0.5, "s")
    assert pts[("diagnose.capture.cpu.utilization", ())] == (0.125, "1")
    assert pts[("diagnose.capture.memory.peak", ())] == (100 << 20, "By")
    v = served_report.verdict
    conf = [p for p in snap.points if p.name == "diagnose.verdict.confidence"]
    assert len(conf) == 1 and conf[0].value == v.confidence
    assert dict(conf[0].attributes)["quadrant"] == v.quadrant.value == "service"
    shares = {dict(p.attributes)["quadrant"]: p.value for p in snap.points if p.name == "diagnose.quadrant.share"}
    assert shares == pytest.approx({q.value: s for q, s in served_report.analysis.accounts[0].shares().items()})
    assert snap.resource["service.name"] == "llm-api"  # the spans' resource, not the process name
    assert snap.resource["process.pid"] == served_report.manifest["target"]["pid"]
    rules = {f.rule_id for f in snap.findings}
    assert rules == {f.rule_id for f in served_report.analysis.findings} and "service.serialization" in rules
    f = next(f for f in snap.findings if f.rule_id == "service.serialization")
    assert f.title and f.evidence[0].startswith("cpu.category_share_pct[serialization]=")


def test_nothing_unmeasured_is_sent_and_the_process_name_stands_in(tmp_path):
    snap = snapshot(analyse(REPO / "fixtures/cpu/service-json"), {"job.id": "4711", "service.name": "mine"})
    names = {p.name for p in snap.points}
    assert not names & {"diagnose.request.rate", "diagnose.request.duration", "diagnose.gen_ai.time_to_first_token",
                        "diagnose.gpu.sm.activity", "diagnose.capture.cpu.time"}  # no spans, GPU or cost record
    assert snap.resource["job.id"] == "4711" and snap.resource["service.name"] == "mine"  # the user's win
    assert snapshot(analyse(REPO / "fixtures/cpu/service-json")).resource["service.name"] == "python"


@pytest.mark.parametrize("cost", [{"wall_s": float("inf"), "diagnose_cpu_s": 1.0}, {"wall_s": 10**400},
                                  {"wall_s": True, "diagnose_cpu_s": "1"}, "not a record"])
def test_a_hostile_cost_record_sends_no_cost(tmp_path, cost):
    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    m = json.loads((b / "manifest.json").read_text())
    m["cost"] = cost
    (b / "manifest.json").write_text(json.dumps(m))
    pts = snapshot(analyse(b)).points
    assert all(math.isfinite(p.value) for p in pts)
    names = {p.name for p in pts}
    assert not names & {"diagnose.capture.duration", "diagnose.capture.cpu.utilization", "diagnose.capture.memory.peak"}
    assert names & {"diagnose.capture.cpu.time"} == ({"diagnose.capture.cpu.time"} if cost == {
        "wall_s": float("inf"), "diagnose_cpu_s": 1.0} else set())  # a sound reading beside a torn one is kept


def test_gpu_activity_as_a_ratio():
    rep = analyse(REPO / "fixtures/gpu/compute-bf16-matmul")
    sm = rep.analysis.signals["gpu.sm_active_pct"].value
    assert sm is not None
    assert _points(snapshot(rep))[("diagnose.gpu.sm.activity", ())] == (pytest.approx(sm / 100), "1")


def test_rank_from_the_torch_trace(tmp_path):
    base = 1_790_000_000_000_000_000
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000.0 + 50 * i,
               "dur": 40.0} for i in range(20)]
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 8, "backend": "nccl"},
           "baseTimeNanoseconds": base, "traceEvents": events}
    trace = tmp_path / "rank3.pt.trace.json"
    trace.write_text(json.dumps(doc))
    (tmp_path / "out").mkdir()
    snap = snapshot(analyse(import_files([trace], tmp_path / "out")))
    assert snap.resource["rank"] == 3


def test_a_hostile_service_name_is_cut_and_escaped(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from diagnose.export.prometheus import exposition
    from export_helpers import write_spans

    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    write_spans(b, n=5)
    evil = 'x"} 1\nfake_metric 666\n#' * 10_000
    lines = [json.loads(line) for line in (b / "spans.jsonl").read_text().splitlines()]
    (b / "spans.jsonl").write_text("".join(json.dumps({**s, "service": evil}) + "\n" for s in lines))
    snap = snapshot(analyse(b))
    assert snap.resource["service.name"] == evil[:256]
    names = {f.name for f in text_string_to_metric_families(exposition(snap).decode())}
    assert "fake_metric" not in names  # the label value is escaped, not a line of its own

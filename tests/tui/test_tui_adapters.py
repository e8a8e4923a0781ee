"""The TUI's pure layer: Analysis / partial bundle -> frozen view-models, on the recorded fixtures."""
from __future__ import annotations

import json
import math
from dataclasses import FrozenInstanceError

import pytest

from diagnose.bundle import Bundle
from diagnose.model import Report
from diagnose.tui.live.adapt import live_view
from diagnose.tui.live.feed import replay_view
from diagnose.tui.live.series import ProcessSeries, SignalHistory
from diagnose.tui.live.tail import JsonlTail
from diagnose.tui.results.adapt import SEVERITY_RANK, results_view
from diagnose.tui.text import fmt_value, spark, split_family
from diagnose.verdict.analyze import analyze
from helpers import SHARED_DATA, run_diagnose
from tui_helpers import FIXTURE_DIRS, FIXTURE_IDS, expected


@pytest.fixture(params=FIXTURE_DIRS, ids=FIXTURE_IDS, scope="module")
def analysed(request):
    b = Bundle.open(request.param)
    return b, analyze(b), expected(request.param)


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)


def test_results_view_shows_the_verdict_findings_and_stacks(analysed):
    b, a, exp = analysed
    vm = results_view(a, b.info, b.path.name)
    assert vm.verdict.quadrant == exp["quadrant"]
    primary = [c for c in vm.verdict.cells if c.primary]
    assert [c.quadrant for c in primary] == [exp["quadrant"]]
    assert [c.quadrant for c in vm.verdict.cells] == ["compute", "bandwidth", "service", "io"]
    assert vm.verdict.plan and vm.verdict.plan[0] in {"model", "engine", "service", "system"}
    # every finding, most severe first, each with its evidence rows
    assert len(vm.findings) == len(a.findings)
    ranks = [SEVERITY_RANK[f.severity] for f in vm.findings]
    assert ranks == sorted(ranks)
    for f in vm.findings:
        assert f.evidence and all(e.source and e.threshold for e in f.evidence)
        assert "whole capture" in f.window
    # the hot function is in the stack tree and shares add up per thread
    labels = [n.label for n in _walk(vm.stacks)]
    assert any(exp["hot_function"] in lab for lab in labels)
    for root in vm.stacks:
        assert root.share_pct == pytest.approx(sum(c.share_pct for c in root.children))
    assert sum(r.share_pct for r in vm.stacks) == pytest.approx(sum(s.share_pct for s in a.top_stacks))
    with pytest.raises(FrozenInstanceError):
        vm.verdict.quadrant = "io"


def test_results_view_says_what_was_not_captured(analysed):
    b, a, _ = analysed
    vm = results_view(a, b.info, b.path.name)
    assert not vm.gaps.table.rows and vm.gaps.table.empty.startswith("not captured:")
    if not any(s.known for n, s in a.signals.items() if n.startswith("spans.")):
        assert vm.latency.empty.startswith("not captured:") and not vm.latency.rows
    names = {r[0] for r in vm.collectors.rows}
    assert {"pyspy", "process"} <= names
    # unknown signals are labelled unknown with their reason, never shown as 0
    for name, value, _ in vm.signals.rows:
        if a.signals[name].value is None:
            assert value.startswith("unknown") and "0.0" not in value


def test_breakdown_bars_come_from_every_percentage_family(analysed):
    b, a, exp = analysed
    vm = results_view(a, b.info, b.path.name)
    cpu = next(g for g in vm.bar_groups if g.title == "cpu category share")
    top = max((s for n, s in a.signals.items() if n.startswith("cpu.category_share_pct[")),
              key=lambda s: s.value or 0)
    assert cpu.bars[0].label == split_family(top.name)[1]
    assert [b.pct for b in cpu.bars] == sorted((b.pct for b in cpu.bars), reverse=True)
    families = {split_family(n)[0] for n, s in a.signals.items() if split_family(n)[1] and s.unit == "%"}
    assert len(vm.bar_groups) == len(families)
    # groups with measured bars come before groups that are all unknown
    measured = [bool(g.bars) for g in vm.bar_groups]
    assert measured == sorted(measured, reverse=True)


def test_live_series_match_the_final_analysis(analysed):
    """The CPU sparkline is built from the same records the analysis reads: their mean agrees."""
    b, a, _ = analysed
    series = ProcessSeries()
    records = list(b.records("process.jsonl"))
    for rec in records:
        series.add_raw(rec)
    snap = series.snapshot()
    # one time-weighted mean per 1 s bucket: the capture's seconds, not its 10 Hz readings
    span_s = (records[-1]["t_ns"] - records[0]["t_ns"]) / 1e9
    assert snap.records == len(records) and len(snap.process_pct) == math.ceil(span_s)
    assert sum(snap.process.weights_s) == pytest.approx(span_s)
    mean = sum(p * w for p, w in zip(snap.process_pct, snap.process.weights_s)) / span_s
    process = a.signals["cpu.process_util_pct"]
    assert mean == pytest.approx(process.value, rel=1e-6)
    assert snap.busiest_tid is not None and snap.busiest_pct is not None


def test_signal_history_recovers_interval_means():
    """Running averages A(t) (what analyze reports live) -> the mean of each interval."""
    intervals = [10.0, 90.0, 50.0, 0.0, 100.0]
    history, total = SignalHistory(), 0.0
    for i, v in enumerate(intervals, 1):
        total += v
        history.add(float(i), {"gpu.sm_active_pct": total / i})
    # the first reading fills bucket 1 (0..1 s]; each later interval (i-1, i] fills bucket i
    assert history.snapshot()["gpu.sm_active_pct"].values == pytest.approx(tuple(intervals))


def test_live_view_panels_without_gpu_or_spans(analysed):
    b, a, _ = analysed
    header, vm = replay_view(Report(b, a))
    assert header.status == "captured" and {c.name for c in header.collectors} >= {"pyspy", "process"}
    assert vm.verdict is not None and vm.verdict.provisional
    assert vm.gpu.note.startswith("not captured:") and not vm.gpu.lines
    assert vm.service.note.startswith("no spans yet:")
    cpu_labels = [line.label for line in vm.cpu.lines]
    assert cpu_labels[0] == "process" and "top frames, capture so far" in cpu_labels
    assert vm.account.lines and vm.account.lines[0].kind == "heading"
    before = live_view(None, b.info, ProcessSeries().snapshot(), {}, None)
    assert before.verdict is None and "waiting" in before.verdict_note


def test_tail_reads_only_complete_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    tail = JsonlTail(path)
    assert list(tail.read()) == []  # the stream may not exist yet
    with open(path, "w") as fh:
        fh.write(json.dumps({"a": 1}) + "\n" + '{"a": ')
        fh.flush()
        assert list(tail.read()) == [{"a": 1}]
        fh.write('2}\n')
        fh.flush()
        assert list(tail.read()) == [{"a": 2}]
        assert list(tail.read()) == []


def test_text_helpers():
    assert fmt_value(None, "%") == "unknown"
    assert fmt_value(0.0, "%") == "0.0%"
    assert spark([0, 50, 100], 3) == "▁▅█"
    assert spark([97, 98], 2) == "██"  # a fixed 0..100 scale: no false swing
    assert split_family("spans.stage_share_pct[queue]") == ("spans.stage_share_pct", "queue")


@pytest.mark.skipif(not (SHARED_DATA / "torch-traces").is_dir(), reason="shared torch traces absent")
def test_gaps_view_on_a_real_trace(tmp_path):
    trace = SHARED_DATA / "torch-traces" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    r = run_diagnose("analyze", str(trace), "--out", str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    bundle = Bundle.open(next(tmp_path.glob("diagnose-*")))
    a = analyze(bundle)
    vm = results_view(a, bundle.info, bundle.path.name).gaps
    traces = a.details.torch_traces
    assert len(vm.table.rows) == sum(len(t["gaps"]) for t in traces) > 0
    assert vm.table.rows[0][3] == (traces[0]["gaps"][0]["host_op"] or "-")
    assert vm.headline.startswith("GPU idle")
    assert any(row[0] == "torch host op" for row in vm.during.rows)


@pytest.mark.skipif(not (SHARED_DATA / "otlp").is_dir(), reason="shared OTLP example absent")
def test_service_panel_and_latency_from_real_spans(tmp_path):
    spans = SHARED_DATA / "otlp" / "opentelemetry-proto_examples_trace.json"
    r = run_diagnose("analyze", str(spans), "--out", str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    bundle = Bundle.open(next(tmp_path.glob("diagnose-*")))
    a = analyze(bundle)
    _, live = replay_view(Report(bundle, a))
    lines = {line.label: line.value for line in live.service.lines}
    assert not live.service.note
    for label, name in (("QPS", "spans.qps"), ("P50", "spans.p50_ms"), ("P99", "spans.p99_ms")):
        assert a.signals[name].known and lines[label] == fmt_value(a.signals[name].value, a.signals[name].unit)
    assert not any(label.startswith(("TTFT", "TPOT")) for label in lines)  # no LLM spans: not shown
    latency = results_view(a, bundle.info, bundle.path.name).latency
    names = [row[0] for row in latency.rows]
    assert names[:5] == ["spans.p50_ms", "spans.p90_ms", "spans.p95_ms", "spans.p99_ms", "spans.p999_ms"]

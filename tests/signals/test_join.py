"""The cross-source join on real recordings: GPU idle gaps of the shared GPU traces joined with a
real py-spy recording (fixtures/cpu/service-json, placed on the trace's clock) and stage spans."""
from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest

from diagnose.agent.inproc.records import make_record
from diagnose.bundle import Bundle
from diagnose.model import Report
from diagnose.render import render
from diagnose.results.joins import ShareRow
from diagnose.signals.join import TimedStack, join
from diagnose.signals.stacks import Frame
from diagnose.signals.timeline import load_timed_stacks, timeline_signals
from diagnose.traces.reader import read_trace
from diagnose.traces.report import analyze_trace
from diagnose.verdict.analyze import analyze
from helpers import REPO, gfm_text
from kineto_helpers import NCCL, RANK0, shared

PYSPY_FIXTURE = REPO / "fixtures" / "cpu" / "service-json"


def _bundle_with_trace(tmp_path, trace_name: str, spans: list[dict] | None = None):
    """The fixture's real py-spy capture + a shared GPU trace, py-spy moved onto the trace's clock."""
    dst = tmp_path / "bundle"
    shutil.copytree(PYSPY_FIXTURE, dst)
    (dst / "torch").mkdir(mode=0o700)
    raw = shared(trace_name).read_bytes()
    (dst / "torch" / "trace-0001.json.gz").write_bytes(raw if raw[:2] == b"\x1f\x8b" else gzip.compress(raw))
    (dst / "torch.jsonl").write_text(json.dumps({
        "file": "torch/trace-0001.json.gz", "start_ns": 0, "end_ns": 0, "base_time_ns": None,
        "activities": ["cpu", "cuda"], "torch_version": "recorded", "error": None}) + "\n")
    report = analyze_trace(read_trace(dst / "torch" / "trace-0001.json.gz"))
    windows = [json.loads(x) for x in (dst / "pyspy.jsonl").read_text().splitlines()]
    shift = report.temporal.first_start_ns - windows[0]["origin_ns"]
    with open(dst / "pyspy.jsonl", "w") as fh:
        for w in windows:
            for k in ("spawn_ns", "exit_ns", "origin_ns"):
                w[k] += shift
            fh.write(json.dumps(w) + "\n")
    if spans:
        (dst / "spans.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    return Bundle.open(dst), report


def _span(name: str, start: int, end: int, parent: str | None, sid: str) -> dict:
    return make_record(trace_id="a" * 32, span_id=sid, parent_span_id=parent, name=name, kind="internal",
                       start_ns=start, end_ns=end, status="ok", attributes={}, events=[],
                       service="svc", source="import")


def test_gpu_gaps_joined_with_pyspy_samples_and_open_span(tmp_path):
    meta = analyze_trace(read_trace(shared(NCCL)))
    lo, hi = meta.temporal.first_start_ns, meta.temporal.last_end_ns
    spans = [_span("POST /infer", lo, hi, None, "1" * 16),
             _span("preprocess", lo, lo + (hi - lo) * 3 // 4, "1" * 16, "2" * 16)]
    bundle, report = _bundle_with_trace(tmp_path, NCCL, spans)
    r = timeline_signals(bundle)
    j = r.details.join.gaps
    assert j is not None and j.kind == "gpu_gaps" and j.windows == len(report.gaps.start_ns) > 0
    # one sampled thread; py-spy's first sample came 18 ms into its window
    assert j.sampled_s is not None and 0.85 * report.gaps.total_ns / 1e9 < j.sampled_s <= report.gaps.total_ns / 1e9
    top = j.threads[0]
    assert top.tid == 3743 and top.busy_pct > 90
    assert top.categories[0].name == "serialization"
    assert j.categories[0].name == "serialization" and j.categories[0].share_pct > 90
    assert j.spans[0].span == "preprocess" and j.spans[0].stage == "preprocess"
    assert 60 < j.spans[0].share_pct < 90
    h = j.headline
    assert h.startswith("GPU idle 77% of the kernel window") and "during the gaps thread 3743 was in `" in h
    assert "inside span `preprocess`" in h and "serialization" in h
    sig = r.signals
    assert sig["join.gap_busy_thread_pct"].value > 90
    assert sig["join.gap_category_share_pct[serialization]"].value > 90
    a = analyze(bundle)
    fired = {f.rule_id for f in a.findings}
    assert {"service.gpu_starved_by_host", "service.gpu_gaps_host_busy"} <= fired
    md = render(Report(bundle, a), "md-full")  # the per-trace timeline is in the full report
    assert "## GPU idle gaps and kernel timeline" in md and h in gfm_text(md)  # as a reader sees it
    listed = r.details.torch_traces[0]["gaps"]
    assert listed and all(g["pyspy"].startswith("3743: ") for g in listed if g["pyspy"])
    assert sum(1 for g in listed if g["pyspy"]) >= len(listed) // 2


def test_gaps_outside_the_pyspy_capture_say_so(tmp_path):
    bundle, _ = _bundle_with_trace(tmp_path, RANK0)
    lines = [json.loads(x) for x in (bundle.path / "pyspy.jsonl").read_text().splitlines()]
    for w in lines:
        w["origin_ns"] -= 10 * 10**9  # the recording now ends before the trace starts
    (bundle.path / "pyspy.jsonl").write_text("".join(json.dumps(w) + "\n" for w in lines))
    r = timeline_signals(bundle)
    gaps = r.details.join.gaps
    assert gaps is not None and gaps.headline.endswith("no py-spy samples were taken.")
    assert r.signals["join.gap_busy_thread_pct"].reason == "no py-spy samples fall inside the windows"


def test_timed_stacks_are_on_the_unix_clock():
    bundle = Bundle.open(PYSPY_FIXTURE)
    stacks = load_timed_stacks(bundle)
    w = json.loads((PYSPY_FIXTURE / "pyspy.jsonl").read_text().splitlines()[0])
    assert stacks and min(s.start_ns for s in stacks) >= w["origin_ns"]
    assert max(s.end_ns for s in stacks) <= w["origin_ns"] + int(w["last_ts_us"] * 1000)


def test_join_counts_idle_threads_and_picks_the_busy_one():
    fr = (Frame("serve_forever", "socketserver.py", 1),)
    work = (Frame("tokenize", "app.py", 10),)
    stacks = [TimedStack(1, "acceptor", 0, 1_000, fr, "idle"),
              TimedStack(2, "worker", 0, 600, work, "tokenization"),
              TimedStack(2, "worker", 600, 1_000, fr, "idle")]
    j = join("gpu_gaps", [(100, 500), (400, 900)], stacks, [])
    assert j.windows == 2 and j.window_s == pytest.approx(800e-9)
    worker = j.threads[0]
    assert worker.thread == "worker (2)" and worker.busy_pct == pytest.approx(62.5)
    assert j.threads[1].busy_pct == 0
    assert j.categories == (ShareRow(name="tokenization", share_pct=100.0, seconds=500e-9),)
    assert np.isclose(j.sampled_s or 0.0, 1600e-9)

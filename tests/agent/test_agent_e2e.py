"""End to end: a torch + OpenTelemetry service started under `diagnose run`, captured with
`diagnose attach <pid>`: the bundle holds a torch trace with the model's aten ops, the service's
stage spans and GC pauses, on the same clock as the py-spy samples (alignment measured here)."""
from __future__ import annotations

import gzip
import json
import stat
import statistics
import sys

import pytest

from agent_helpers import service  # noqa: F401  (fixture)
from helpers import WORKLOADS, findings, only_bundle, run_diagnose

pytest.importorskip("torch", reason="torch is needed for the model service")

PYSPY_PERIOD_MS = 10.0  # --rate 100


def spans_by_name(bundle) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for line in (bundle / "spans.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["name"], []).append(rec)
    return out


def torch_events(bundle) -> tuple[list[dict], list[dict]]:
    """The index records of every torch window and all their events (each tagged with its
    window's clock base as ``_base``); the agent writes raw traces, the importer gzipped ones."""
    index = [json.loads(x) for x in (bundle / "torch.jsonl").read_text().splitlines()]
    assert index and all(r["error"] is None for r in index), index
    events = []
    for r in index:
        raw = (bundle / r["file"]).read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        events += [{**e, "_base": r["base_time_ns"]} for e in doc["traceEvents"]]
    return index, events


def torch_vs_span_offsets_us(events: list[dict], spans: list[dict]) -> list[float]:
    """For each mirrored 'model' label in the torch trace: its start minus its span's start (us)."""
    starts = sorted(s["start_ns"] for s in spans)
    out = []
    for ev in events:
        if ev.get("name") == "model" and ev.get("ph") == "X":
            t_ns = ev["_base"] + ev["ts"] * 1000
            nearest = min(starts, key=lambda s: abs(s - t_ns))
            out.append((t_ns - nearest) / 1000)
    return out


def pyspy_model_segments(bundle) -> list[tuple[int, int]]:
    """Unix-ns intervals in which py-spy saw the serving thread inside run_model."""
    from diagnose.signals.stacks import segments_from_chrometrace

    out = []
    for line in (bundle / "pyspy.jsonl").read_text().splitlines():
        w = json.loads(line)
        events = json.loads((bundle / w["file"]).read_text())
        for seg in segments_from_chrometrace(events):
            if any(f.function == "run_model" for f in seg.frames):
                out.append((w["origin_ns"] + int(seg.start_us * 1000), w["origin_ns"] + int(seg.end_us * 1000)))
    return out


def _merge(ivals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ivals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap_ns(xs: list[tuple[int, int]], ys: list[tuple[int, int]], shift_ns: int) -> int:
    """Total overlap of the (merged, sorted) intervals xs shifted by shift_ns with ys."""
    i = j = total = 0
    while i < len(xs) and j < len(ys):
        a, b = xs[i][0] + shift_ns, xs[i][1] + shift_ns
        lo, hi = max(a, ys[j][0]), min(b, ys[j][1])
        total += max(0, hi - lo)
        if b < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def pyspy_clock_offset_ms(segments, spans) -> tuple[float, float]:
    """The shift of py-spy's run_model intervals that best overlaps the 'model' spans (ms), and the
    share of py-spy's run_model time inside those spans at that shift.

    py-spy sees a stage from its first sample inside to the first sample after, both late by
    U[0, period]: with aligned clocks the best shift is about -period/2.
    """
    xs, ys = _merge(segments), _merge([(s["start_ns"], s["end_ns"]) for s in spans if s["end_ns"]])
    shifts = [int(d * 1e5) for d in range(-500, 501)]  # -50 ms .. +50 ms in 0.1 ms steps
    best = max(shifts, key=lambda d: (_overlap_ns(xs, ys, d), -abs(d)))
    total = sum(b - a for a, b in xs)
    return best / 1e6, _overlap_ns(xs, ys, best) / total if total else 0.0


@pytest.mark.live  # timing bounds on a live target (clock alignment to ~ms): on a loaded host, beside the
# default run's workers, a preempted stage or sample broke them (2 of 3 runs right after a full run)
def test_run_then_attach_bundles_torch_trace_spans_and_gc_on_one_clock(service, tmp_path):  # noqa: F811
    svc = service("--model-iters", "80")
    # the rate and the budget this test asks for keep py-spy at PYSPY_PERIOD_MS (the checks below assume
    # it; the default 10% lowered it to ~67 Hz on 4 threads, and samples overran the spans by 15 ms)
    res = run_diagnose("attach", str(svc.pid), "--duration", "8", "--torch-window", "3", "--overhead-budget", "40",
                       "--rate", "100", "--out", str(tmp_path), "--no-tui", timeout=150)
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    agent = {c["name"]: c for c in manifest["collectors"]}["agent"]
    assert agent["state"] == "ok", agent
    assert agent["counts"]["spans"] > 20 and agent["counts"]["gc_pauses"] > 0

    index, events = torch_events(bundle)
    assert all(r["activities"] == ["cpu"] and r["base_time_ns"] > 0 for r in index)
    # bounded windows (diagnose/agent/inproc/windowplan.py): each stop and export held the target
    # for at most the budget, as the agent measured it
    assert all(max(r["stop_s"], r["export_s"]) <= 0.1 for r in index[1:]), index  # 50 ms + CI slack
    serve_tids = {e["tid"] for e in events if e.get("name") == "aten::addmm"}
    assert serve_tids, "no aten::addmm from the model in the torch trace"
    names = {e.get("name") for e in events}
    # the model's ops; the mirrored stage labels appear when a bounded window (tens of ms,
    # windowplan.py) happens to hold a stage's start, which a loaded host does not guarantee
    assert {"aten::linear", "aten::relu"} <= names
    assert any(e.get("args", {}).get("Input Dims") for e in events if e.get("name") == "aten::addmm")

    spans = spans_by_name(bundle)
    assert {"request", "queue", "model", "serialize"} <= set(spans)
    req = {s["span_id"]: s for s in spans["request"]}
    assert all(s["parent_span_id"] in req for s in spans["model"] if s["end_ns"] and s["parent_span_id"] in req)
    assert any(s["parent_span_id"] in req for s in spans["model"])
    r = spans["request"][0]
    assert r["kind"] == "server" and r["service"] == "agent-test" and r["source"] == "agent"
    assert len(r["attributes"]["payload"]) <= 1025  # bounded attribute size
    gc_rec = json.loads((bundle / "gc.jsonl").read_text().splitlines()[0])
    assert gc_rec["end_ns"] >= gc_rec["start_ns"] > 0 and gc_rec["generation"] in (0, 1, 2)

    # One clock: torch (Kineto base + us) vs OTel spans (time.time_ns)
    torch_off = torch_vs_span_offsets_us(events, spans["model"])
    offs = sorted(abs(x) for x in torch_off)  # the stages inside the bounded torch windows, if any
    # same clock: the typical stage is tens of us apart (a clock/base error moves them all); a stage
    # preempted between its span start and its torch label may be ~1.5 ms off on a loaded host
    assert not offs or (offs[len(offs) // 2] < 500 and offs[int(0.8 * len(offs))] < 2000), torch_off
    # py-spy samples (window origin + us) vs spans
    segments = pyspy_model_segments(bundle)
    assert len(segments) > 10
    shift_ms, inside = pyspy_clock_offset_ms(segments, spans["model"])
    err_ms = abs(shift_ms + PYSPY_PERIOD_MS / 2)
    print(f"\nalignment torch-span: median {statistics.median(torch_off or [0]):.1f} us, "
          f"max |{max([abs(x) for x in torch_off] or [0]):.1f}| us over {len(torch_off)} stages; "
          f"py-spy-span: best shift {shift_ms:.1f} ms (expected -{PYSPY_PERIOD_MS / 2:.0f} ms from "
          f"sampling), error {err_ms:.1f} ms, {100 * inside:.0f}% of run_model samples inside model spans")
    origin_err_ms = max(json.loads(x)["origin_err_ns"] for x in (bundle / "pyspy.jsonl").read_text().splitlines()) / 1e6
    # measured 0.8-5 ms; bound: py-spy's own origin uncertainty (origin_err_ns) + one sampling period
    assert err_ms < origin_err_ms + PYSPY_PERIOD_MS, (err_ms, origin_err_ms)
    # a segment lasts until the next sample, so up to one period of each runs past its span's end:
    # measured 0.72-0.80 on a quiet host with the alignment error under 3 ms
    assert inside > 0.65

    assert stat.S_IMODE((bundle / "torch").stat().st_mode) == 0o700
    for f in ("spans.jsonl", "gc.jsonl", "torch.jsonl", *(r["file"] for r in index)):
        assert stat.S_IMODE((bundle / f).stat().st_mode) == 0o600, f
    doc = findings(bundle)
    assert {c["name"]: c["state"] for c in doc["collectors"]}["agent"] == "ok"


def test_run_with_capture_writes_a_bundle_and_returns_the_command_exit_code(tmp_path):
    import tempfile

    runtime = tempfile.mkdtemp(prefix="dg-")
    res = run_diagnose("run", "--capture", "2", "--torch-window", "0", "--out", str(tmp_path / "out"),
                       "--no-tui", "--", sys.executable, str(WORKLOADS / "agent_service.py"), "--no-torch",
                       "--max-s", "9", env={"XDG_RUNTIME_DIR": runtime}, timeout=120)
    assert res.returncode == 0, res.stderr  # the command's own exit code
    assert "READY" in res.stdout and "report:" in res.stdout
    doc = findings(only_bundle(tmp_path / "out"))
    agent = {c["name"]: c for c in doc["collectors"]}["agent"]
    assert agent["state"] == "ok" and agent["counts"]["spans"] > 0, agent
    assert "torch: not requested" in agent["reason"]


def test_run_usage_errors_and_print_env():
    res = run_diagnose("run")
    assert res.returncode == 2 and "no command given" in res.stderr
    res = run_diagnose("run", "--", "no-such-command-for-diagnose")
    assert res.returncode == 2 and "command not found: no-such-command-for-diagnose" in res.stderr
    assert "agent preloaded" not in res.stderr  # nothing runs: no pid to attach to
    res = run_diagnose("run", "--", sys.executable, "-c", "import os; print(os.getpid())")
    pid = res.stdout.strip()
    assert res.returncode == 0 and f"diagnose: pid {pid} runs " in res.stderr  # exec keeps the pid
    assert f"until `diagnose attach {pid}`" in res.stderr
    res = run_diagnose("run", "--print-env")
    assert res.returncode == 0
    assert "diagnose/agent/inproc/preload" in res.stdout and "export DIAGNOSE_AGENT=1" in res.stdout

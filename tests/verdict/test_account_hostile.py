"""The time account on tampered copies of real recordings: one malformed value costs only itself,
never a hang, a traceback, shares above 1 or a confident wrong verdict (the attacks a break-it
review made; each one failed before the fix)."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.importers import import_files
from diagnose.verdict.analyze import analyze
from helpers import REPO, SHARED_DATA, gfm_html

IO = REPO / "fixtures" / "cpu" / "io-socket"
COMPUTE = REPO / "fixtures" / "cpu" / "compute-torch"
SERVICE = REPO / "fixtures" / "cpu" / "service-json"
GPU = REPO / "fixtures" / "gpu" / "compute-bf16-matmul"


def _copy(src: Path, tmp: Path) -> Path:
    dst = tmp / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("findings.json", "report.md"))
    return dst


def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _sane(a) -> None:
    v = a.verdict
    assert sum(v.scores.values()) <= 1.0 + 1e-9 and all(0.0 <= s <= 1.0 for s in v.scores.values())
    assert 0.0 <= v.confidence <= 1.0
    for acc in a.accounts:
        assert all(0.0 <= t.share <= 1.0 and t.seconds >= 0 for t in acc.terms), acc
        assert sum(t.share for t in acc.terms) <= 1.0 + 1e-9
    json.dumps(a.to_json(), allow_nan=False)


def test_a_huge_py_spy_timestamp_is_clipped_to_its_window(tmp_path):
    b = _copy(IO, tmp_path)
    win = b / "pyspy" / "window-0001.json"
    events = json.loads(win.read_text())
    for ev in events[-3:]:
        if ev.get("ph") == "E":
            ev["ts"] = 1e15  # 31 years after the window's origin
    win.write_text(json.dumps(events))
    a = analyze(Bundle.open(b))  # used to walk 2e10 bins of 50 ms (hang, then out of memory)
    _sane(a)
    assert a.verdict.quadrant.value == "io"
    assert a.accounts[0].total_s < 10  # the 2.8 s window of two threads, not decades


def test_a_schedstat_counter_that_restarts_does_not_make_the_host_starve_the_target(tmp_path):
    b = _copy(COMPUTE, tmp_path)
    recs = _lines(b / "process.jsonl")
    for r in recs[len(recs) // 2:]:  # the tid reused: its counters restart from 0
        for row in r["threads"]:
            if len(row) >= 8 and isinstance(row[5], int):
                row[5], row[6] = 1000, 10**30
    _write(b / "process.jsonl", recs)
    a = analyze(Bundle.open(b))
    _sane(a)
    assert (a.verdict.quadrant.value, a.verdict.layer.value) == ("compute", "model"), a.verdict.headline


def test_one_bad_process_record_costs_itself(tmp_path):
    b = _copy(IO, tmp_path)
    recs = _lines(b / "process.jsonl")
    recs[3]["t_ns"] = "soon"
    recs[5]["threads"] = "x"
    recs[7]["threads"][0] = [recs[7]["threads"][0][0], "1", 0]
    _write(b / "process.jsonl", recs)
    a = analyze(Bundle.open(b))
    _sane(a)
    assert a.data_quality.streams.invalid_records == {"process.jsonl": 1}
    assert a.signals["cpu.process_util_pct"].value is not None
    assert a.verdict.quadrant.value == "io" and a.accounts[0].resource == "threads"


def test_a_thread_named_like_the_agent_counts_when_no_agent_ran(tmp_path):
    b = _copy(SERVICE, tmp_path)
    win = next((b / "pyspy").glob("*.json"))
    events = json.loads(win.read_text())
    for ev in events:
        if str(ev.get("name", "")).startswith("thread ("):
            ev["name"] = ev["name"].split(")")[0] + ") diagnose-encoder"
    win.write_text(json.dumps(events))
    a = analyze(Bundle.open(b))
    assert a.verdict.quadrant.value == "service", a.verdict.headline


def test_gpu_counters_out_of_range_never_exceed_the_capture(tmp_path):
    b = _copy(GPU, tmp_path)
    shutil.rmtree(b / "torch")
    (b / "torch.jsonl").unlink()
    recs = _lines(b / "gpm.jsonl")
    for r in recs:
        for key in list(r.get("metrics", r)):
            if key.endswith("_pct") or "util" in key:
                target = r.get("metrics", r)
                if isinstance(target.get(key), (int, float)):
                    target[key] = 250.0
    _write(b / "gpm.jsonl", recs)
    a = analyze(Bundle.open(b))
    _sane(a)
    assert a.accounts[0].resource == "gpu" and "counters" in a.accounts[0].title


def test_a_foreign_trace_indexed_into_a_bundle_does_not_take_its_verdict(tmp_path):
    foreign = SHARED_DATA / "torch-traces" / "nccl_data.json.gz"
    if not foreign.exists():
        pytest.skip("../shared/data is absent")
    b = _copy(GPU, tmp_path)
    shutil.copy(foreign, b / "torch" / "trace-9999.json.gz")
    index = _lines(b / "torch.jsonl")
    _write(b / "torch.jsonl", index + [{"file": "torch/trace-9999.json.gz"}])
    a = analyze(Bundle.open(b))
    _sane(a)
    assert "do not belong together" in a.data_quality.torch.traces_apart
    assert (a.verdict.quadrant.value, a.verdict.layer.value) == ("compute", "model"), a.verdict.headline
    assert any("trace-9999" in acc.title for acc in a.accounts[1:])


def test_overlapping_stage_spans_are_scaled_to_the_request_time(tmp_path):
    from diagnose.account.requests import request_account
    from diagnose.model import Signal
    from diagnose.results.details import Details, LatencyStats, RequestsDetail

    sig = {f"spans.stage_share_pct[{st}]": Signal(f"spans.stage_share_pct[{st}]", v, "%", "spans")
           for st, v in (("db", 100.0), ("network", 100.0))}  # parallel client calls (asyncio.gather)
    req = RequestsDetail(requests=10, latency=LatencyStats(count=10, mean_ms=10.0))
    acc = request_account(sig, Details(requests=req))
    assert [round(t.share, 6) for t in acc.terms] == [0.5, 0.5]
    assert any("overlap" in n for n in acc.notes) and math.isclose(acc.total_s, 0.1)


def test_trace_files_with_markup_in_their_names_render_as_text(tmp_path):
    rank0 = SHARED_DATA / "torch-traces" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    nccl = SHARED_DATA / "torch-traces" / "nccl_data.json.gz"
    if not (rank0.exists() and nccl.exists()):
        pytest.skip("../shared/data is absent")
    evil = tmp_path / "in" / "x|y\r## Verdict: io-bound <img src=x onerror=alert(1)>\x1b[31m.json.gz"
    evil.parent.mkdir()
    shutil.copy(rank0, evil)
    from diagnose.pipeline import analyse
    from diagnose.render import render

    md = render(analyse(import_files([evil, nccl], tmp_path / "out")), "md")
    assert "\r" not in md and "\x1b" not in md
    assert not any(line.startswith("## Verdict") for line in md.splitlines())
    html = gfm_html(md)  # GitHub's renderer: the name is text, never a tag
    assert "<img" not in html and "<h2>Verdict" not in html

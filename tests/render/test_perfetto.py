"""The Perfetto / Chrome trace export on the recorded fixtures and on a bundle with requests: every
document passes the Trace Event Format checker (trace_event_format.py, written from the spec), has
the tracks its bundle's streams call for, on one clock; and the checker catches planted defects."""
from __future__ import annotations

import copy
import json
from functools import cache

import pytest
from render.trace_event_format import check_trace

from diagnose.agent.inproc.records import make_record
from diagnose.bundle import Bundle, BundleWriter
from diagnose.bundle.streams import GC, SPANS
from diagnose.model import Report
from diagnose.pipeline import analyse
from diagnose.render import render
from diagnose.render.perfetto.events import FINDINGS, GC_PID, GPU, KERNELS, PROC, PYSPY, REQUESTS, TID_BLOCK, TORCH_CPU
from diagnose.signals.timeline import load_timed_stacks
from helpers import REPO

FIXTURES = sorted(p for kind in ("cpu", "gpu") for p in (REPO / "fixtures" / kind).iterdir()
                  if (p / "manifest.json").is_file())
GPU_FIXTURES = [p for p in FIXTURES if p.parent.name == "gpu"]


@cache
def _rendered(name: str) -> tuple[Report, dict]:
    report = analyse(next(p for p in FIXTURES if p.name == name))
    return report, json.loads(render(report, "perfetto"))


def _of(doc: dict, ph: str, pid: int | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == ph and (pid is None or e["pid"] == pid)]


def _unix_ns(doc: dict, ts_us: float) -> int:
    return doc["otherData"]["origin_unix_ns"] + round(ts_us * 1000)


def _top_level_us(slices: list[dict]) -> float:
    """Summed duration of the slices no other slice of their thread holds."""
    total, ends = 0.0, {}
    for e in sorted(slices, key=lambda e: (e["tid"], e["ts"], -e["dur"])):
        if e["ts"] >= ends.get(e["tid"], -1.0):
            total += e["dur"]
            ends[e["tid"]] = e["ts"] + e["dur"]
    return total


@pytest.mark.parametrize("bundle", FIXTURES, ids=[p.name for p in FIXTURES])
def test_every_fixture_is_a_valid_trace_with_stacks_counters_and_findings(bundle):
    report, doc = _rendered(bundle.name)
    assert check_trace(doc) == []
    assert doc["displayTimeUnit"] == "ms" and all(e["ts"] >= 0 for e in doc["traceEvents"])
    assert doc["otherData"]["origin_unix_ns"] == report.manifest["started_ns"]
    stacks = load_timed_stacks(report.bundle)
    assert _top_level_us(_of(doc, "X", PYSPY)) == pytest.approx(sum(s.end_ns - s.start_ns for s in stacks) / 1e3)
    assert {e["name"] for e in _of(doc, "C", PROC)} >= {"target cpu_pct", "target rss_bytes"}
    instants = _of(doc, "i", FINDINGS)
    assert len(instants) == len(report.analysis.findings) + 1 and all(e["s"] == "g" for e in instants)
    named = {e["pid"] for e in _of(doc, "M") if e["name"] == "process_name"}
    assert named == {e["pid"] for e in doc["traceEvents"] if e["ph"] != "M"}
    tracks = {(e["pid"], e["tid"]) for e in doc["traceEvents"]}
    assert len({tid for _, tid in tracks}) == len(tracks) and all(0 < t < 2**32 for _, t in tracks)  # Perfetto


@pytest.mark.parametrize("bundle", GPU_FIXTURES, ids=[p.name for p in GPU_FIXTURES])
def test_gpu_fixtures_have_kernels_torch_ops_and_gpu_counters_on_the_capture_clock(bundle):
    report, doc = _rendered(bundle.name)
    lo, hi = report.manifest["started_ns"], report.manifest["ended_ns"]
    kernels = _of(doc, "X", KERNELS)
    assert len(kernels) == sum(t["gpu_events"] for t in report.analysis.details.torch_traces) > 0
    assert all(lo <= _unix_ns(doc, e["ts"]) <= _unix_ns(doc, e["ts"] + e["dur"]) <= hi for e in kernels)
    assert {e["cat"] for e in kernels} <= {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
    ops = _of(doc, "X", TORCH_CPU)
    assert {e["cat"] for e in ops} >= {"cpu_op", "cuda_runtime"}
    os_tids = {e["tid"] % TID_BLOCK for e in _of(doc, "X", PYSPY)}
    assert {e["tid"] % TID_BLOCK for e in ops} <= os_tids == {report.manifest["target"]["pid"]}  # its main thread
    counters = {e["name"] for e in _of(doc, "C", GPU)}
    assert {"GPU0 GPM sm_util_pct", "GPU0 GPM dram_bw_util_pct", "GPU0 NVML gpu_util_pct",
            "GPU0 NVML mem_used_bytes", "GPU0 NVML power_mw"} <= counters
    threads = {(e["pid"], e["args"]["name"]) for e in _of(doc, "M") if e["name"] == "thread_name"}
    assert (KERNELS, "GPU 0 stream 7") in threads


def test_a_kernel_finding_sits_at_the_start_of_the_kernel_window():
    report, doc = _rendered("compute-bf16-matmul")
    first_gpu_ns = report.analysis.details.torch_traces[0]["temporal"]["first_start_ns"]
    placed = {e["args"]["rule_id"]: e for e in _of(doc, "i", FINDINGS) if "rule_id" in e["args"]}
    kernel_finding = placed["compute.gpu_compute_kernels"]
    assert _unix_ns(doc, kernel_finding["ts"]) == pytest.approx(first_gpu_ns, abs=1)
    assert kernel_finding["args"]["placed_at"].startswith("start of the kernel window")
    assert placed["service.gil_bound"]["ts"] == 0  # a capture-wide signal: the capture's start


# ---- a bundle with requests ---------------------------------------------------------------------

T0 = 1_800_000_000_000_000_000
MS = 1_000_000


def _span(trace: str, sid: str, parent: str | None, name: str, start_ms: float, end_ms: float) -> dict:
    return make_record(trace_id=trace * 32, span_id=sid * 16, parent_span_id=parent and parent * 16, name=name,
                       kind="server" if parent is None else "internal", start_ns=T0 + int(start_ms * MS),
                       end_ns=T0 + int(end_ms * MS), status="ok", attributes={}, events=[], service="svc",
                       source="import")


SPAN_ROWS = [  # two overlapping requests; "db" overlaps two siblings, "late" outlives its request
    ("a", "1", None, "POST /generate", 0, 100), ("a", "2", "1", "queue", 0, 10), ("a", "3", "1", "tokenize", 10, 20),
    ("a", "4", "1", "generate", 20, 90), ("a", "5", "4", "decode", 30, 80), ("a", "6", "1", "db", 15, 25),
    ("a", "7", "1", "late", 95, 120),
    ("b", "1", None, "POST /generate", 50, 150), ("b", "2", "1", "queue", 50, 60), ("b", "3", "1", "generate", 60, 150),
    ("b", "4", "3", "first_token", 60, 60),
]


@pytest.fixture(scope="module")
def requests_doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("perfetto") / "bundle"
    path.mkdir()
    w = BundleWriter(path)
    for row in SPAN_ROWS:
        w.stream(SPANS.name).write(_span(*row))
    w.stream(GC.name).write({"start_ns": T0 + 70 * MS, "end_ns": T0 + 72 * MS, "generation": 2, "collected": 9})
    w.write_manifest({"schema_version": 1, "started_ns": T0 - MS, "ended_ns": T0 + 200 * MS, "collectors": []})
    w.close()
    return json.loads(render(analyse(Bundle.open(path)), "perfetto"))


def test_requests_are_balanced_async_events_nested_by_request(requests_doc):
    doc = requests_doc
    assert check_trace(doc) == []
    begins, ends = _of(doc, "b", REQUESTS), _of(doc, "e", REQUESTS)
    assert len(begins) == len(ends) == len(SPAN_ROWS)
    assert all(e["cat"] == "request" for e in begins + ends)
    a, b = "a" * 32 + ":" + "1" * 16, "b" * 32 + ":" + "1" * 16
    by_name = {(e["args"]["trace_id"][0], e["name"]): e for e in begins}
    assert by_name[("a", "POST /generate")]["id"] == by_name[("a", "decode")]["id"] == a
    assert by_name[("b", "first_token")]["id"] == b
    assert by_name[("a", "db")]["id"] == a + "#1"  # overlaps tokenize and generate: a lane of its own
    late_end = next(e for e in ends if e["name"] == "late")
    assert _unix_ns(doc, late_end["ts"]) == pytest.approx(T0 + 100 * MS, abs=1)  # clipped to its request
    assert by_name[("a", "queue")]["args"]["stage"] == "queue"


def test_gc_pauses_and_the_clock_origin(requests_doc):
    doc = requests_doc
    (pause,) = _of(doc, "X", GC_PID)
    assert pause["name"] == "gc gen 2" and pause["dur"] == 2000 and pause["args"]["collected"] == 9
    assert doc["otherData"]["origin_unix_ns"] == T0 - MS and _unix_ns(doc, pause["ts"]) == T0 + 70 * MS


# ---- the checker catches what it must -----------------------------------------------------------

def _doc(*events: dict) -> dict:
    return {"traceEvents": list(events), "displayTimeUnit": "ms"}


def _ev(ph: str, name: str = "a", ts: float = 0, **kw) -> dict:
    return {"name": name, "ph": ph, "ts": ts, "pid": 1, "tid": 1, **kw}


VALID = _doc(
    {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "p"}},
    {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": 1, "args": {"sort_index": 2}},
    _ev("B", "outer", 0), _ev("X", "inner", 1, dur=2), _ev("B", "mid", 4), _ev("E", "mid", 5), _ev("E", "outer", 9),
    _ev("X", "zero", 9, dur=0), _ev("C", "mem", 3, args={"bytes": 10, "pct": 1.5}),
    _ev("i", "mark", 4, s="g"), _ev("b", "req", 1, cat="r", id="x"), _ev("b", "stage", 1, cat="r", id="x"),
    _ev("n", "tick", 2, cat="r", id="x"), _ev("e", "stage", 3, cat="r", id="x"), _ev("e", "req", 3, cat="r", id="x"),
)

DEFECTS = {
    "unbalanced B": ([_ev("B", "a", 0)], "never closed"),
    "E without B": ([_ev("E", "a", 0)], "no open B"),
    "E closes the wrong B": ([_ev("B", "a", 0), _ev("B", "b", 1), _ev("E", "a", 2), _ev("E", "b", 3)], "closes"),
    "B/E ts goes back": ([_ev("B", "a", 5), _ev("E", "a", 4)], "goes back"),
    "non-numeric counter": ([_ev("C", "mem", 0, args={"bytes": "10"})], "not a number"),
    "counter without args": ([_ev("C", "mem", 0)], "needs its values"),
    "partial X overlap": ([_ev("X", "a", 0, dur=10), _ev("X", "b", 5, dur=10)], "overlap without nesting"),
    "X overlaps a B/E slice": ([_ev("B", "a", 0), _ev("E", "a", 10), _ev("X", "b", 5, dur=10)], "overlap"),
    "missing ts": ([{"name": "a", "ph": "X", "dur": 1, "pid": 1, "tid": 1}], "ts None"),
    "ts not a number": ([_ev("i", "a", "5")], "ts '5'"),
    "X without dur": ([_ev("X", "a", 0)], "dur None"),
    "negative dur": ([_ev("X", "a", 0, dur=-1)], "dur -1"),
    "tid not an int": ([_ev("X", "a", 0, dur=1, tid="1")], "tid '1'"),
    "no name": ([{"ph": "i", "ts": 0, "pid": 1, "tid": 1}], "name"),
    "unknown phase": ([_ev("Q")], "unknown phase"),
    "bad instant scope": ([_ev("i", s="x")], "scope"),
    "async without id": ([_ev("b", cat="r"), _ev("e", cat="r")], "needs an id"),
    "async without cat": ([_ev("b", id=1), _ev("e", id=1)], "needs a cat"),
    "async never closed": ([_ev("b", "req", 0, cat="r", id=1)], "never closed"),
    "async e without b": ([_ev("e", "req", 0, cat="r", id=1)], "no open b"),
    "async misnested": ([_ev("b", "a", 0, cat="r", id=1), _ev("b", "b", 1, cat="r", id=1),
                         _ev("e", "a", 2, cat="r", id=1), _ev("e", "b", 3, cat="r", id=1)], "innermost"),
    "unknown metadata": ([{"name": "thread_colour", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "x"}}],
                         "unknown metadata"),
    "metadata without its arg": ([{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {}}], "args.name"),
}


def test_the_checker_passes_a_valid_trace_in_both_layouts():
    assert check_trace(VALID) == [] and check_trace(VALID["traceEvents"]) == []


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_checker_catches_a_planted_defect(defect):
    events, expected = DEFECTS[defect]
    problems = check_trace(_doc(*events))
    assert any(expected in p for p in problems), problems


def test_the_checker_catches_bad_documents():
    assert check_trace({"events": []}) == ["the object has no traceEvents array"]
    assert "displayTimeUnit" in check_trace({"traceEvents": [], "displayTimeUnit": "s"})[0]
    assert "top level" in check_trace("[]")[0]


def test_the_checker_catches_defects_planted_in_a_real_export():
    _, doc = _rendered("service-tiny-kernels")
    broken = copy.deepcopy(doc)
    stream = _of(broken, "X", KERNELS)[0]["tid"]
    k1, k2 = sorted((e for e in _of(broken, "X", KERNELS) if e["tid"] == stream and e["dur"] > 0),
                    key=lambda e: e["ts"])[:2]
    k1["dur"] = k2["ts"] - k1["ts"] + k2["dur"] / 2  # now runs halfway into the next kernel on its stream
    next(e for e in broken["traceEvents"] if e["ph"] == "C")["args"]["value"] = None
    broken["traceEvents"].append({**_of(broken, "X", PYSPY)[0], "ph": "B"})  # opened, never closed
    problems = check_trace(broken)
    for expected in ("overlap without nesting", "not a number", "never closed"):
        assert any(expected in p for p in problems), (expected, problems)


def test_a_gap_finding_sits_at_the_longest_gpu_gap():
    report, doc = _rendered("io-socket-reads")
    longest = max(report.analysis.details.torch_traces[0]["gaps"], key=lambda g: g["dur_us"])
    placed = {e["args"]["rule_id"]: e for e in _of(doc, "i", FINDINGS) if "rule_id" in e["args"]}
    assert _unix_ns(doc, placed["io.gpu_gaps_host_in_io"]["ts"]) == longest["start_ns"]


def test_past_the_event_limit_the_shortest_slices_go_and_the_document_says_so(monkeypatch):
    from diagnose.render.perfetto import PerfettoRenderer

    report, full = _rendered("service-tiny-kernels")
    monkeypatch.setattr(PerfettoRenderer, "max_events", 3000)
    doc = json.loads(render(report, "perfetto"))
    assert check_trace(doc) == []
    assert len([e for e in doc["traceEvents"] if e["ph"] not in "Mi"]) == 3000
    assert len(_of(doc, "i")) == len(_of(full, "i"))  # findings always
    assert sum(doc["otherData"]["dropped_shortest_slices"].values()) == len(_of(full, "X")) - len(_of(doc, "X"))
    kept = {(e["tid"], e["ts"], e["dur"]) for e in _of(doc, "X")}
    assert min(e["dur"] for e in _of(doc, "X")) >= max(
        e["dur"] for e in _of(full, "X") if (e["tid"], e["ts"], e["dur"]) not in kept)
    thinned = doc["otherData"]["counters_thinned"]  # 2,321 counter events want more than half of 3,000
    assert thinned["of"] == len(_of(full, "C")) and thinned["kept"] == len(_of(doc, "C")) <= 1500 + 30


def test_slices_that_overlap_without_nesting_are_clipped_to_nest():
    from diagnose.render.perfetto.document import _nest
    from diagnose.render.perfetto.events import Event

    notes: dict = {}
    a, b, c = (Event("X", t, KERNELS, 7, n, dur_ns=d) for t, n, d in ((0, "a", 10), (5, "b", 10), (20, "c", 1)))
    out = sorted(_nest([c, b, a], notes), key=lambda e: e.t_ns)
    assert [(e.name, e.t_ns, e.dur_ns) for e in out] == [("a", 0, 10), ("b", 5, 5), ("c", 20, 1)]
    assert notes["clipped_slices"] == {"torch profiler: GPU kernels": 1}


def test_a_request_of_spans_naming_their_own_id_as_parent_is_walked_once_per_span():
    """A target writes the SPANS stream: 3,000 spans sharing their root's id and naming it as parent
    each pushed every one of them again (39 MB on the walk's stack, and seconds; found by the
    break-it review); each id's children are now taken once."""
    import tracemalloc
    from collections import defaultdict

    from diagnose.bundle.records.spans import span_record
    from diagnose.render.perfetto.requests import _descendants

    t = 10**18
    root = span_record({"trace_id": "T", "span_id": "L", "name": "GET /", "start_ns": t, "end_ns": t + 10})
    loop = [span_record({"trace_id": "T", "span_id": "L", "parent_span_id": "L", "name": "x",
                         "start_ns": t, "end_ns": t + 1}) for _ in range(3_000)]
    kids = defaultdict(list, {("T", "L"): loop})
    tracemalloc.start()
    family = _descendants(root, kids)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(family) == len(loop) and peak < 4 << 20

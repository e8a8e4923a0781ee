"""Perfetto / Chrome trace: the whole capture as one Trace Event Format document (JSON object
format) for https://ui.perfetto.dev ("Open trace file") or chrome://tracing ("Load").

Clock: ``ts`` is µs (float, ns resolution) since ``otherData.origin_unix_ns``: the capture's start
(manifest ``started_ns``), or the earliest event if one comes before it, so no ``ts`` is negative.
Each source reaches the Unix clock through the function the analysis uses: py-spy through
``load_timed_stacks`` (window ``origin_ns`` + chrometrace µs), torch traces through ``read_trace``
(``baseTimeNanoseconds`` + µs), readings through their ``t_ns``, spans and GC pauses through
``start_ns``/``end_ns``.

Tracks, one trace process per source family (pids 1-8, in display order): requests (each root span
with its descendants as nestable async ``b``/``e`` under the request's id; a child that overlaps a
sibling without nesting gets a lane, i.e. an id, of its own; children are clipped to their request),
py-spy samples (``X`` per thread; consecutive samples sharing a frame at one depth make one slice,
so slices nest like the call stack), torch CPU ops and runtime calls per thread, GPU kernels, memcpy
and memset per device and stream (``X``), GPU counters (NVML values at their reading; GPM and DCGM
values cover the interval up to their reading, so each is drawn from the previous one), process
counters (CPU % between readings, 100 = one core; host busy %; RSS), GC pauses (``X``), findings.

Findings carry no time; each is a global instant (``i``, ``s: "g"``) at the moment its evidence
describes: the longest GPU idle gap (evidence on gaps: ``join.gap_*``, ``gpu.idle_gap_*``), the
slowest request (``spans.*``, ``llm.*``, ``join.slow_*``), the kernel window's start (first signal
from the torch trace; both windows from ``analysis.details``), else the capture's start
(capture-wide averages); ``placed_at`` says which. Beyond MAX_EVENTS events the shortest slices
are left out and counters thinned (said in ``otherData``). Pure: reads only the Report and its bundle (Bundle API).
"""
from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from diagnose import __version__
from diagnose.bundle.streams import GC, PROCESS, SPANS, THREADS
from diagnose.model import Finding, Report
from diagnose.render.base import Renderer
from diagnose.render.units import pid_text

if TYPE_CHECKING:
    from diagnose.bundle import Bundle
    from diagnose.signals.join import TimedStack
    from diagnose.signals.spans.analytics import Span
    from diagnose.signals.stacks import Frame
    from diagnose.traces.reader import KinetoTrace
    from diagnose.traces.schema import Table

REQUESTS, PYSPY, TORCH_CPU, KERNELS, GPU, PROC, GC_PID, FINDINGS = range(1, 9)  # trace pids, display order
PROCESS_NAMES = {REQUESTS: "Requests (spans)", PYSPY: "py-spy samples", TORCH_CPU: "torch profiler: CPU ops",
                 KERNELS: "torch profiler: GPU kernels", GPU: "GPU counters (NVML, GPM, DCGM)",
                 PROC: "Process counters (psutil)", GC_PID: "GC pauses", FINDINGS: "diagnose findings"}
MAX_EVENTS = 200_000
TID_BLOCK = 10_000_000  # a document tid is pid * TID_BLOCK + the source's tid (Linux tids stay below 2**22)
COUNTER_SKIP = ("mem_total_bytes", "clock_event_reasons")  # a constant and a bit mask: no counter track
Names = dict[tuple[int, int], str]


@dataclass(frozen=True, slots=True)
class Event:
    """One trace event before it is placed on the output clock (times in Unix ns)."""

    ph: str
    t_ns: int
    pid: int
    tid: int
    name: str
    cat: str = ""
    dur_ns: int = 0
    args: dict[str, Any] | None = None
    id: str | None = None
    scope: str | None = None

    def to_json(self, origin_ns: int) -> dict[str, Any]:
        out = {"name": self.name, "ph": self.ph, "ts": _us(self.t_ns - origin_ns), "pid": self.pid,
               "tid": _tid(self.pid, self.tid), "cat": self.cat or None,
               "dur": _us(self.dur_ns) if self.ph == "X" else None, "id": self.id, "s": self.scope,
               "args": self.args or None}
        return {k: v for k, v in out.items() if v is not None}


class PerfettoRenderer(Renderer):
    format = "perfetto"
    extension = ".perfetto.json"
    title = "Perfetto"
    description = "the capture as one trace: stacks, torch ops, kernels, counters, requests, findings (ui.perfetto.dev)"
    tui_key = "p"

    def render(self, report: Report) -> str:
        names: Names = {}
        notes: dict[str, Any] = {}
        b = report.bundle
        events = [*_pyspy(b, names), *_torch(b, names, notes), *_gpu_counters(b), *_process(b), *_gc(b, names)]
        requests, slowest = _requests(b, names, notes)
        events = _cap(_nest(_in_window(report, events + requests, notes), notes), notes)
        events += _findings(report, slowest, events)
        started = report.manifest.get("started_ns")
        origin = min([e.t_ns for e in events] + ([started] if type(started) is int else []), default=0)
        events.sort(key=lambda e: (e.t_ns, -e.dur_ns))  # stable: async b/e keep their nesting order
        doc = {"traceEvents": _metadata(report, events, names) + [e.to_json(origin) for e in events],
               "displayTimeUnit": "ms", "otherData": _other_data(report, events, origin, notes)}
        return json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"


FAR_NS = 3600 * 10**9  # events further than this outside the capture window are clock errors


def _in_window(report: Report, events: list[Event], notes: dict[str, Any]) -> list[Event]:
    """Events within FAR_NS of the capture window (when the manifest has one): a span stamped at
    the epoch (µs read as ns) would otherwise put every other event 1e15 µs from the origin, past
    the float precision the Trace Event Format's µs timestamps have."""
    lo, hi = report.manifest.get("started_ns"), report.manifest.get("ended_ns")
    if type(lo) is not int or type(hi) is not int or hi < lo:
        return events
    kept = [e for e in events if lo - FAR_NS <= e.t_ns <= hi + FAR_NS and e.t_ns + e.dur_ns <= hi + FAR_NS]
    if len(kept) < len(events):
        notes["events_outside_capture_dropped"] = len(events) - len(kept)
    return kept


def _us(ns: int) -> float:
    """``ns`` (>= 0) as µs such that truncating ``us * 1000`` (Perfetto's JSON importer) gives ``ns``."""
    us = ns / 1000
    while int(us * 1000.0) < ns:
        us = math.nextafter(us, math.inf)
    return us


def _tid(pid: int, tid: int) -> int:
    """A track's tid in the document: unique across the trace's processes (Perfetto files thread
    names by tid alone) and a uint32 (as Perfetto reads it); the source's own tid is ``% TID_BLOCK``."""
    return pid * TID_BLOCK + tid % TID_BLOCK


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _counter(pid: int, t_ns: int, name: str, value: Any) -> list[Event]:
    return [Event("C", t_ns, pid, 0, name, args={"value": value})] if _num(value) else []


# ---- py-spy -------------------------------------------------------------------------------------

def _pyspy(bundle: Bundle, names: Names) -> list[Event]:
    from diagnose.signals.timeline import load_timed_stacks

    by_tid: dict[int, list[TimedStack]] = defaultdict(list)
    for st in load_timed_stacks(bundle):
        by_tid[st.tid].append(st)
    comm = {r["tid"]: r["comm"] for r in bundle.stream(THREADS)
            if type(r.get("tid")) is int and isinstance(r.get("comm"), str)}
    out: list[Event] = []
    for tid, stacks in sorted(by_tid.items()):
        label = stacks[0].thread if stacks[0].thread != "?" else comm.get(tid, "thread")
        names[(PYSPY, tid)] = f"{label} ({tid})"
        out += _stack_slices(tid, sorted(stacks, key=lambda s: s.start_ns))
    return out


def _stack_slices(tid: int, stacks: list[TimedStack]) -> list[Event]:
    """One slice per frame held over consecutive samples (a new stack that starts where the last
    ended keeps the frames it shares from the root down), as py-spy's own chrometrace has them."""
    out: list[Event] = []
    held: list[tuple[Frame, int]] = []
    end = -1
    for st in stacks:
        keep = 0
        if st.start_ns == end:
            while keep < min(len(held), len(st.frames)) and held[keep][0] == st.frames[keep]:
                keep += 1
        out += [_frame_slice(tid, f, t0, end) for f, t0 in reversed(held[keep:])]
        del held[keep:]
        start = max(st.start_ns, end)
        held += [(f, start) for f in st.frames[keep:]]
        end = max(st.end_ns, start)
    return out + [_frame_slice(tid, f, t0, end) for f, t0 in reversed(held)]


def _frame_slice(tid: int, f: Frame, start_ns: int, end_ns: int) -> Event:
    return Event("X", start_ns, PYSPY, tid, f.function or "?", "py-spy", end_ns - start_ns,
                 {"file": f.file, "line": f.line})


# ---- torch profiler traces ----------------------------------------------------------------------

def _torch(bundle: Bundle, names: Names, notes: dict[str, Any]) -> list[Event]:
    from diagnose.signals.timeline import read_member_trace, trace_files
    from diagnose.traces.reader import TraceReadError

    out: list[Event] = []
    for path, base in trace_files(bundle):
        try:
            trace = read_member_trace(bundle, path, base)
        except TraceReadError as exc:
            notes.setdefault("torch_traces_left_out", []).append(str(exc)[:300])
            continue
        if not trace.meta.unix_clock:
            notes.setdefault("torch_traces_left_out", []).append(f"{path.name}: not on the Unix clock")
            continue
        out += [e for table in (trace.cpu, trace.runtime) for e in _table_events(trace, table, TORCH_CPU, names)]
        out += _table_events(trace, trace.gpu, KERNELS, names)
    return out


def _table_events(trace: KinetoTrace, table: Table, pid: int, names: Names) -> list[Event]:
    """The rows of one trace table as X slices (at most MAX_EVENTS of them, the longest): host
    rows on their thread, GPU rows on a track per device (Kineto's pid) and stream (its tid)."""
    import numpy as np

    from diagnose.traces.schema import CAT_RUNTIME, CATEGORY_NAMES

    if not len(table):
        return []
    rows = np.sort(np.argsort(-table["dur_ns"], kind="stable")[:MAX_EVENTS])
    cols = [table[k][rows].tolist() for k in ("start_ns", "dur_ns", "pid", "tid", "name")]
    cats = table["cat"][rows].tolist() if "cat" in table.columns else [CAT_RUNTIME] * len(rows)  # runtime: no cat
    out = []
    for t, d, p, tid, n, c in zip(*cols, cats):
        track = p * 1000 + tid if pid == KERNELS else tid
        if (pid, track) not in names:
            names[(pid, track)] = (f"GPU {p} stream {tid}" if pid == KERNELS
                                   else trace.thread_names.get((p, tid)) or f"thread {tid}")
        out.append(Event("X", t, pid, track, trace.names[n], CATEGORY_NAMES[c], max(d, 0)))
    return out


# ---- counters -----------------------------------------------------------------------------------

def _gpu_counters(bundle: Bundle) -> list[Event]:
    from diagnose.signals.gpu_dcgm import read_dcgm
    from diagnose.signals.gpu_series import read_gpm, read_nvml

    nv, gpm, dc = read_nvml(bundle), read_gpm(bundle), read_dcgm(bundle)
    out: list[Event] = []
    for gpu, rows in sorted(nv.readings.items()):
        out += _series(f"GPU{gpu} NVML", [(r.t_ns, r.values) for r in rows], interval=False)
    for uuid, grows in sorted(gpm.readings.items()):
        index = gpm.devices[uuid].gpu if uuid in gpm.devices else uuid
        out += _series(f"GPU{index} GPM", [(r.t_ns, r.metrics) for r in grows], interval=True)
    for (_uuid, gi), drows in sorted(dc.series.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        label = f"GPU{drows[0][1].gpu}" + (f"/GI{gi}" if gi is not None else "")
        out += _series(f"{label} DCGM", [(t, ent.values) for t, ent in drows], interval=True)
    return out


def _series(prefix: str, points: list[tuple[int, dict[str, Any]]], interval: bool) -> list[Event]:
    """One counter event per metric and reading; ``interval``: each value describes the time since
    the previous reading (the first: one reading interval before it) and is drawn from there."""
    points = sorted(points, key=lambda p: p[0])
    times = [t for t, _ in points]
    if interval and len(times) > 1:
        times = [2 * times[0] - times[1]] + times[:-1]
    return [e for t, (_, values) in zip(times, points) for key, v in sorted(values.items())
            if key not in COUNTER_SKIP for e in _counter(GPU, t, f"{prefix} {key}", v)]


def _process(bundle: Bundle) -> list[Event]:
    from diagnose.bundle.counters import host_cpu, process_cpu_s
    from diagnose.signals.gpu_series import numbers

    recs = sorted(bundle.stream(PROCESS), key=lambda r: r["t_ns"])
    out: list[Event] = []
    for a, b in zip(recs, recs[1:]):
        dt_s = (b["t_ns"] - a["t_ns"]) / 1e9
        if dt_s <= 0:
            continue
        host = host_cpu(numbers(a.get("sys_cpu_s")), numbers(b.get("sys_cpu_s")))
        out += _counter(PROC, a["t_ns"], "target cpu_pct", 100.0 * (process_cpu_s(b) - process_cpu_s(a)) / dt_s)
        out += _counter(PROC, a["t_ns"], "host busy_pct", host.busy_pct if host else None)
    for r in recs:
        out += [e for k in ("rss_bytes", "num_threads") for e in _counter(PROC, r["t_ns"], f"target {k}", r.get(k))]
    return out


def _gc(bundle: Bundle, names: Names) -> list[Event]:
    from diagnose.signals.spans.tail import gc_pauses

    out: list[Event] = []
    for r in bundle.stream(GC):
        for start, end in gc_pauses((r,)):
            args = {k: r[k] for k in ("generation", "collected", "uncollectable") if type(r.get(k)) is int}
            name = f"gc gen {args['generation']}" if "generation" in args else "gc"
            out.append(Event("X", start, GC_PID, 0, name, "gc", end - start, args or None))
    if out:
        names[(GC_PID, 0)] = "gc pauses (gc.callbacks)"
    return out


# ---- requests -----------------------------------------------------------------------------------

def _requests(bundle: Bundle, names: Names, notes: dict[str, Any]) -> tuple[list[Event], Span | None]:
    """Every request (root span) with its descendants, as async events; (events, slowest request)."""
    from diagnose.signals.spans.analytics import parse_spans
    from diagnose.signals.spans.sampling import agent_sampling

    ss = parse_spans(bundle.stream(SPANS))
    kids: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for s in ss.spans:
        if s.parent_span_id:
            kids[(s.trace_id, s.parent_span_id)].append(s)
    roots = sorted((r.span for r in ss.requests), key=lambda s: s.start_ns)
    out: list[Event] = []
    budget = MAX_EVENTS // 4  # spans: two events each, at most half the document
    for n, root in enumerate(roots):
        family = _descendants(root, kids)
        if len(family) + 1 > budget:
            notes["requests_left_out"] = len(roots) - n
            break
        budget -= len(family) + 1
        out += _request_events(root, family)
    if out:
        names[(REQUESTS, 0)] = "requests"
    sampling = agent_sampling(bundle.manifest.get("collectors") or [])
    if sampling is not None and roots:  # every written request is shown; the analysis reads the final sample
        notes["requests_shown"] = (f"{len(roots)} requests: every one the agent wrote; the report's counts use "
                                   f"the final 1-in-{sampling.one_in} sample of traces, scaled")
    return out, max(roots, key=lambda s: s.dur_ns, default=None)


def _descendants(root: Span, kids: dict[tuple[str, str], list[Span]]) -> list[Span]:
    seen, out, todo = {id(root)}, [], list(kids.get((root.trace_id, root.span_id), ()))
    while todo:
        s = todo.pop()
        if id(s) not in seen:  # a hand-edited stream may repeat ids or make a span its own parent
            seen.add(id(s))
            out.append(s)
            todo += kids.get((s.trace_id, s.span_id), ())
    return out


def _request_events(root: Span, family: list[Span]) -> list[Event]:
    """Lanes of properly nested spans (lane 0 holds the request); each lane is one async id."""
    lo, hi = root.start_ns, root.end_ns
    items = [(root, lo, hi)] + sorted(((s, min(max(s.start_ns, lo), hi), max(min(s.end_ns, hi), lo)) for s in family),
                                      key=lambda x: (x[1], -x[2]))
    lanes: list[list[tuple[Span, int, int]]] = []
    open_ends: list[list[int]] = []  # per lane: the ends of the spans open at the current start
    for item in items:
        for ends in open_ends:
            while ends and ends[-1] <= item[1]:
                ends.pop()
        k = next((k for k, ends in enumerate(open_ends) if not ends or item[2] <= ends[-1]), len(lanes))
        if k == len(lanes):
            lanes.append([])
            open_ends.append([])
        lanes[k].append(item)
        open_ends[k].append(item[2])
    rid = f"{root.trace_id}:{root.span_id}"
    return [e for k, lane in enumerate(lanes) for e in _async_pairs(lane, rid if k == 0 else f"{rid}#{k}")]


def _async_pairs(lane: list[tuple[Span, int, int]], aid: str) -> list[Event]:
    """b/e events of one lane's spans, in an order that nests them (stable-sorted by ts later)."""
    from diagnose.signals.spans.analytics import stage_of

    out: list[Event] = []
    held: list[tuple[Span, int, int]] = []
    for span, start, end in lane + [(lane[0][0], 2**63, 2**63)]:  # the sentinel closes everything
        while held and held[-1][2] <= start:
            s, _, e = held.pop()
            out.append(Event("e", e, REQUESTS, 0, s.name, "request", id=aid))
        if start < 2**63:
            args = {"trace_id": span.trace_id, "span_id": span.span_id, "kind": span.kind,
                    "status": span.status, "stage": stage_of(span)}
            out.append(Event("b", start, REQUESTS, 0, span.name, "request", 0,
                             {k: v for k, v in args.items() if v is not None}, aid))
            held.append((span, start, end))
    return out


# ---- findings, limits, metadata -----------------------------------------------------------------

def _phase(f: Finding) -> str:
    """Which moment a finding refers to: GPU gaps or requests if any evidence is about them, the
    kernel window if its first signal comes from the torch trace, else the whole capture."""
    from diagnose.signals.catalog import spec_for

    names = [e.signal for e in f.evidence]
    if any(n.startswith(("join.gap_", "gpu.idle_gap")) for n in names):
        return "gap"
    if any(n.startswith(("spans.", "llm.", "join.slow_")) for n in names):
        return "request"
    spec = spec_for(names[0]) if names else None
    return "kernels" if spec is not None and spec.source == "timeline" else "capture"


def _moments(report: Report, slowest: Span | None, events: list[Event]) -> dict[str, tuple[int, str]]:
    started = report.manifest.get("started_ns")
    first = min((e.t_ns for e in events), default=0)
    out = {"capture": (started if type(started) is int else first, "capture start")}
    traces = [t for t in report.analysis.details.get("torch_traces") or () if isinstance(t, dict)]
    kernel = [t["temporal"].get("first_start_ns") for t in traces if isinstance(t.get("temporal"), dict)]
    if kernel and type(kernel[0]) is int:
        out["kernels"] = (kernel[0], "start of the kernel window (first GPU event)")
    gaps = [g for t in traces for g in t.get("gaps") or () if isinstance(g, dict) and type(g.get("start_ns")) is int]
    if gaps:
        out["gap"] = (max(gaps, key=lambda g: g.get("dur_us") or 0)["start_ns"], "start of the longest GPU idle gap")
    if slowest is not None:
        out["request"] = (slowest.start_ns, f"start of the slowest request ({slowest.dur_ns / 1e6:.1f} ms)")
    return out


def _findings(report: Report, slowest: Span | None, events: list[Event]) -> list[Event]:
    moments = _moments(report, slowest, events)
    t0, _ = moments["capture"]
    v = report.verdict
    out = [Event("i", t0, FINDINGS, 0, f"verdict: {v.headline}", "verdict", scope="g",
                 args={"quadrant": v.quadrant.value, "layer": v.layer.value if v.layer else None,
                       "confidence": round(v.confidence, 3)})]
    for f in report.analysis.findings:
        t, where = moments.get(_phase(f), moments["capture"])
        evidence = [f"{e.signal} = {e.value:g} {e.unit} ({e.op} {e.threshold:g})" for e in f.evidence]
        out.append(Event("i", t, FINDINGS, 0, f"{f.severity.value}: {f.title}", "finding", scope="g", args={
            "rule_id": f.rule_id, "summary": f.summary, "quadrant": f.quadrant.value if f.quadrant else "secondary",
            "layer": f.layer.value, "confidence": round(f.confidence, 3), "evidence": evidence, "placed_at": where}))
    return out


def _nest(events: list[Event], notes: dict[str, Any]) -> list[Event]:
    """X slices of one track that overlap without nesting (Kineto's rounding, a stream's
    overlapping kernels) get their end clipped to the enclosing slice's end."""
    tracks: dict[tuple[int, int], list[Event]] = defaultdict(list)
    out: list[Event] = []
    for e in events:
        (tracks[(e.pid, e.tid)] if e.ph == "X" else out).append(e)
    clipped: Counter[str] = Counter()
    for track in tracks.values():
        track.sort(key=lambda e: (e.t_ns, -e.dur_ns))
        ends: list[int] = []
        for i, e in enumerate(track):
            while ends and ends[-1] <= e.t_ns:
                ends.pop()
            if ends and e.t_ns + e.dur_ns > ends[-1]:
                track[i] = e = replace(e, dur_ns=ends[-1] - e.t_ns)
                clipped[PROCESS_NAMES[e.pid]] += 1
            ends.append(e.t_ns + e.dur_ns)
        out += track
    if clipped:
        notes["clipped_slices"] = dict(clipped)
    return out


def _cap(events: list[Event], notes: dict[str, Any]) -> list[Event]:
    """At most MAX_EVENTS events (the findings come on top): the shortest slices go first (what is
    left still nests); counters are thinned to every k-th reading where they need over half."""
    if len(events) <= MAX_EVENTS:
        return events
    counters = [e for e in events if e.ph == "C"]
    slices = sorted((e for e in events if e.ph == "X"), key=lambda e: -e.dur_ns)
    room = max(0, MAX_EVENTS - (len(events) - len(counters) - len(slices)))
    step = math.ceil(len(counters) / max(1, min(len(counters), max(room - len(slices), room // 2)))) or 1
    series: dict[str, list[Event]] = defaultdict(list)
    for e in counters:
        series[e.name].append(e)
    kept = [e for points in series.values() for e in points[::step]]
    n = max(0, room - len(kept))
    if step > 1:
        notes["counters_thinned"] = {"kept_every": step, "kept": len(kept), "of": len(counters)}
    if n < len(slices):
        notes["dropped_shortest_slices"] = dict(Counter(PROCESS_NAMES[e.pid] for e in slices[n:]))
    keep = {id(e) for e in kept + slices[:n]}
    return [e for e in events if e.ph not in "CX" or id(e) in keep]


def _who(report: Report) -> str:
    target = report.manifest.get("target") or {}
    return f"pid {pid_text(target)} ({target.get('name', '?')})"


def _meta(what: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": what, "ph": "M", "ts": 0, "pid": pid, "tid": _tid(pid, tid), "args": args}


def _metadata(report: Report, events: list[Event], names: Names) -> list[dict[str, Any]]:
    who, threads = _who(report), {(e.pid, e.tid) for e in events}
    out: list[dict[str, Any]] = []
    for pid in sorted({e.pid for e in events}):
        label = PROCESS_NAMES[pid] + (f": {who}" if pid in (PYSPY, PROC) else "")
        out += [_meta("process_name", pid, 0, name=label), _meta("process_sort_index", pid, 0, sort_index=pid)]
    return out + [_meta("thread_name", pid, tid, name=name) for (pid, tid), name in sorted(names.items())
                  if (pid, tid) in threads]


def _other_data(report: Report, events: list[Event], origin: int, notes: dict[str, Any]) -> dict[str, Any]:
    m = report.manifest
    return {"exporter": f"diagnose {__version__}", "target": _who(report),
            "clock": "ts: microseconds since origin_unix_ns (Unix epoch ns): the capture's start, or the earliest "
                     "event before it", "origin_unix_ns": origin,
            "capture_started_ns": m.get("started_ns"), "capture_ended_ns": m.get("ended_ns"),
            "verdict": report.verdict.headline,
            "events": dict(Counter(PROCESS_NAMES[e.pid] for e in events)), **notes}


__all__ = ["MAX_EVENTS", "PerfettoRenderer"]

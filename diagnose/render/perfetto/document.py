"""The Perfetto renderer: every part's events within the capture window, slices clipped to nest,
the document capped at ``max_events`` events (the shortest slices are left out and counters
thinned, said in ``otherData``), then the track metadata and the JSON document. Pure: reads only the
Report and its bundle (Bundle API)."""
from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from diagnose import __version__
from diagnose.model import Report
from diagnose.render.base import Renderer
from diagnose.render.perfetto.events import MAX_EVENTS, PROC, PROCESS_NAMES, PYSPY, Event, Names, doc_tid
from diagnose.render.perfetto.findings import finding_events
from diagnose.render.perfetto.requests import request_events
from diagnose.render.perfetto.streams import gc_events, gpu_counter_events, process_events, pyspy_events, torch_events
from diagnose.render.units import pid_text


class PerfettoRenderer(Renderer):
    format = "perfetto"
    extension = ".perfetto.json"
    title = "Perfetto"
    description = "the capture as one trace: stacks, torch ops, kernels, counters, requests, findings (ui.perfetto.dev)"
    tui_key = "p"
    max_events = MAX_EVENTS  # beyond it the shortest slices go and counters thin out

    def render(self, report: Report) -> str:
        names: Names = {}
        notes: dict[str, Any] = {}
        b = report.bundle
        events = [*pyspy_events(b, names), *torch_events(b, names, notes, self.max_events), *gpu_counter_events(b),
                  *process_events(b), *gc_events(b, names)]
        requests, slowest = request_events(b, names, notes, self.max_events)
        events = _cap(_nest(_in_window(report, events + requests, notes), notes), notes, self.max_events)
        events += finding_events(report, slowest, events)
        started = report.bundle.info.started_ns
        origin = min([e.t_ns for e in events] + ([started] if started is not None else []), default=0)
        events.sort(key=lambda e: (e.t_ns, -e.dur_ns))  # stable: async b/e keep their nesting order
        doc = {"traceEvents": _metadata(report, events, names) + [e.to_json(origin) for e in events],
               "displayTimeUnit": "ms", "otherData": _other_data(report, events, origin, notes)}
        return json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"


FAR_NS = 3600 * 10**9  # events further than this outside the capture window are clock errors


def _in_window(report: Report, events: list[Event], notes: dict[str, Any]) -> list[Event]:
    """Events within FAR_NS of the capture window (when the manifest has one): a span stamped at
    the epoch (µs read as ns) would otherwise put every other event 1e15 µs from the origin, past
    the float precision the Trace Event Format's µs timestamps have."""
    lo, hi = report.bundle.info.started_ns, report.bundle.info.ended_ns
    if lo is None or hi is None or hi < lo:
        return events
    kept = [e for e in events if lo - FAR_NS <= e.t_ns <= hi + FAR_NS and e.t_ns + e.dur_ns <= hi + FAR_NS]
    if len(kept) < len(events):
        notes["events_outside_capture_dropped"] = len(events) - len(kept)
    return kept


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


def _cap(events: list[Event], notes: dict[str, Any], max_events: int) -> list[Event]:
    """At most ``max_events`` events (the findings come on top): the shortest slices go first (what is
    left still nests); counters are thinned to every k-th reading where they need over half."""
    if len(events) <= max_events:
        return events
    counters = [e for e in events if e.ph == "C"]
    slices = sorted((e for e in events if e.ph == "X"), key=lambda e: -e.dur_ns)
    room = max(0, max_events - (len(events) - len(counters) - len(slices)))
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
    target = report.bundle.info.target
    return f"pid {pid_text(target)} ({'?' if target.name is None else target.name})"


def _meta(what: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": what, "ph": "M", "ts": 0, "pid": pid, "tid": doc_tid(pid, tid), "args": args}


def _metadata(report: Report, events: list[Event], names: Names) -> list[dict[str, Any]]:
    who, threads = _who(report), {(e.pid, e.tid) for e in events}
    out: list[dict[str, Any]] = []
    for pid in sorted({e.pid for e in events}):
        label = PROCESS_NAMES[pid] + (f": {who}" if pid in (PYSPY, PROC) else "")
        out += [_meta("process_name", pid, 0, name=label), _meta("process_sort_index", pid, 0, sort_index=pid)]
    return out + [_meta("thread_name", pid, tid, name=name) for (pid, tid), name in sorted(names.items())
                  if (pid, tid) in threads]


def _other_data(report: Report, events: list[Event], origin: int, notes: dict[str, Any]) -> dict[str, Any]:
    m = report.bundle.info
    return {"exporter": f"diagnose {__version__}", "target": _who(report),
            "clock": "ts: microseconds since origin_unix_ns (Unix epoch ns): the capture's start, or the earliest "
                     "event before it", "origin_unix_ns": origin,
            "capture_started_ns": m.started_ns, "capture_ended_ns": m.ended_ns,
            "verdict": report.verdict.headline,
            "events": dict(Counter(PROCESS_NAMES[e.pid] for e in events)), **notes}


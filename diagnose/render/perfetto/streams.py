"""The capture's streams as trace events, each read through the function the analysis uses: py-spy
samples (``X`` per thread; consecutive samples sharing a frame at one depth make one slice, so slices
nest like the call stack), torch CPU ops and runtime calls per thread, GPU kernels, memcpy and memset
per device and stream (``X``), GPU counters (NVML values at their reading; GPM and DCGM values cover
the interval up to their reading, so each is drawn from the previous one), process counters (CPU %
between readings, 100 = one core; host busy %; RSS), GC pauses (``X``)."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from diagnose.bundle.streams import GC, PROCESS, THREADS
from diagnose.render.perfetto.events import (
    COUNTER_SKIP,
    GC_PID,
    GPU,
    KERNELS,
    PROC,
    PYSPY,
    TORCH_CPU,
    Event,
    Names,
    counter,
)

if TYPE_CHECKING:
    from diagnose.bundle import Bundle
    from diagnose.signals.join import TimedStack
    from diagnose.signals.stacks import Frame
    from diagnose.traces.reader import KinetoTrace
    from diagnose.traces.schema import Table


def pyspy_events(bundle: Bundle, names: Names) -> list[Event]:
    from diagnose.signals.timeline import load_timed_stacks

    by_tid: dict[int, list[TimedStack]] = defaultdict(list)
    for st in load_timed_stacks(bundle):
        by_tid[st.tid].append(st)
    comm = {r.tid: r.comm for r in bundle.typed(THREADS) if r.comm is not None}
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


def torch_events(bundle: Bundle, names: Names, notes: dict[str, Any], max_events: int) -> list[Event]:
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
        out += [e for table in (trace.cpu, trace.runtime)
                for e in _table_events(trace, table, TORCH_CPU, names, max_events)]
        out += _table_events(trace, trace.gpu, KERNELS, names, max_events)
    return out


def _table_events(trace: KinetoTrace, table: Table, pid: int, names: Names, max_events: int) -> list[Event]:
    """The rows of one trace table as X slices (at most ``max_events`` of them, the longest): host
    rows on their thread, GPU rows on a track per device (Kineto's pid) and stream (its tid)."""
    import numpy as np

    from diagnose.traces.schema import CAT_RUNTIME, CATEGORY_NAMES

    if not len(table):
        return []
    rows = np.sort(np.argsort(-table["dur_ns"], kind="stable")[:max_events])
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


def gpu_counter_events(bundle: Bundle) -> list[Event]:
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
            if key not in COUNTER_SKIP for e in counter(GPU, t, f"{prefix} {key}", v)]


def process_events(bundle: Bundle) -> list[Event]:
    from diagnose.bundle.counters import host_cpu, process_cpu_s

    recs = sorted(bundle.typed(PROCESS), key=lambda r: r.t_ns)
    out: list[Event] = []
    for a, b in zip(recs, recs[1:]):
        dt_s = (b.t_ns - a.t_ns) / 1e9
        cpu_a, cpu_b = process_cpu_s(a), process_cpu_s(b)
        if dt_s <= 0 or cpu_a is None or cpu_b is None:
            continue
        host = host_cpu(a.sys_cpu_s, b.sys_cpu_s)
        out += counter(PROC, a.t_ns, "target cpu_pct", 100.0 * (cpu_b - cpu_a) / dt_s)
        out += counter(PROC, a.t_ns, "host busy_pct", host.busy_pct if host else None)
    for r in recs:
        out += counter(PROC, r.t_ns, "target rss_bytes", r.rss_bytes)
        out += counter(PROC, r.t_ns, "target num_threads", r.num_threads)
    return out


def gc_events(bundle: Bundle, names: Names) -> list[Event]:
    """The GC pauses the analysis reads (GcPauseRecord: a malformed record is left out)."""
    out: list[Event] = []
    for r in bundle.typed(GC):
        counts = (("generation", r.generation), ("collected", r.collected), ("uncollectable", r.uncollectable))
        args = {k: v for k, v in counts if v is not None}
        name = f"gc gen {r.generation}" if r.generation is not None else "gc"
        out.append(Event("X", r.start_ns, GC_PID, 0, name, "gc", r.end_ns - r.start_ns, args or None))
    if out:
        names[(GC_PID, 0)] = "gc pauses (gc.callbacks)"
    return out


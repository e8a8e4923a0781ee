"""Cross-source join on the Unix-ns clock: what the target's threads did during chosen windows.

Windows are GPU idle gaps (kernel timeline), torch-op idle gaps on a CPU-only trace (no kernels:
the host's torch-op timeline stands in for the GPU's), or the slowest requests (spans). For each,
the py-spy samples of every thread inside the windows (py-spy segment times are the window's
``origin_ns`` + chrometrace ``ts`` µs) give per-thread shares by frame category and function, and
the stage spans open during the windows say which service stage held them. Pure: inputs are
already-loaded segments, windows and spans.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnose.catalogs.frames import PARKED
from diagnose.results.joins import JoinDetail, JoinThread, ShareRow, SpanShare
from diagnose.signals.spans.analytics import Span, stage_of
from diagnose.signals.stacks import Frame
from diagnose.traces.intervals import merge, overlap_each

TOP = 5


@dataclass(frozen=True)
class TimedStack:
    """A py-spy stack held by a thread over [start_ns, end_ns) on the Unix clock."""

    tid: int
    thread: str
    start_ns: int
    end_ns: int
    frames: tuple[Frame, ...]
    category: str


def _function(frame: Frame) -> str:
    """A function with its file but not its line: samples on every line of it add up."""
    return f"{frame.function} ({'/'.join(frame.file.rsplit('/', 2)[-2:]) if frame.file else '?'})"


def _shares(acc: dict[str, float], total: float, n: int = TOP) -> tuple[ShareRow, ...]:
    rows = sorted(acc.items(), key=lambda kv: -kv[1])[:n]
    return tuple(ShareRow(name=k, share_pct=100.0 * v / total, seconds=v / 1e9) for k, v in rows if total > 0)


@dataclass(frozen=True)
class Sampled:
    """The samples inside a set of windows: their seconds, per thread (busiest first), and the
    non-idle time by category and function."""

    sampled_s: float = 0.0
    threads: tuple[JoinThread, ...] = ()
    categories: tuple[ShareRow, ...] = ()
    functions: tuple[ShareRow, ...] = ()


def threads_in_windows(stacks: list[TimedStack], ws: np.ndarray, we: np.ndarray) -> Sampled:
    """Per-thread and overall sampled time inside the (disjoint, sorted) windows."""
    if not stacks or not len(ws):
        return Sampled()
    lo = np.array([s.start_ns for s in stacks], np.int64)
    hi = np.array([s.end_ns for s in stacks], np.int64)
    inside = overlap_each(ws, we, lo, hi)
    per_thread: dict[int, dict[str, Any]] = {}
    cats: dict[str, float] = defaultdict(float)
    funcs: dict[str, float] = defaultdict(float)
    for st, t in zip(stacks, inside.tolist()):
        if t <= 0:
            continue
        label = f"{st.thread} ({st.tid})" if st.thread and st.thread != "?" else str(st.tid)
        row = per_thread.setdefault(st.tid, {"tid": st.tid, "thread": label, "sampled": 0.0,
                                             "busy": 0.0, "cats": defaultdict(float), "funcs": defaultdict(float)})
        row["sampled"] += t
        row["cats"][st.category] += t
        if st.category not in PARKED:
            row["busy"] += t
            fn = _function(st.frames[-1])
            row["funcs"][fn] += t
            cats[st.category] += t
            funcs[fn] += t
    threads = tuple(JoinThread(tid=row["tid"], thread=row["thread"], sampled_s=row["sampled"] / 1e9,
                               busy_pct=100.0 * row["busy"] / row["sampled"],
                               categories=_shares(row["cats"], row["sampled"]),
                               functions=_shares(row["funcs"], row["sampled"]))
                    for row in sorted(per_thread.values(), key=lambda r: -r["busy"]))
    busy = sum(cats.values())
    return Sampled(float(inside.sum()) / 1e9, threads, _shares(cats, busy, 10), _shares(funcs, busy))


def spans_in_windows(spans: list[Span], ws: np.ndarray, we: np.ndarray) -> tuple[SpanShare, ...]:
    """Share of window time each non-root span name (with its stage) was open."""
    total = int((we - ws).sum())
    if not spans or total <= 0:
        return ()
    acc: dict[tuple[str, str | None], list[tuple[int, int]]] = defaultdict(list)
    for s in spans:
        if s.parent_span_id:
            acc[(s.name, stage_of(s))].append((s.start_ns, s.end_ns))
    rows: list[SpanShare] = []
    for (name, stage), iv in acc.items():
        a = np.array(iv, np.int64)
        open_s, open_e = merge(a[:, 0], a[:, 1])
        t = int(overlap_each(open_s, open_e, ws, we).sum())
        if t > 0:
            rows.append(SpanShare(span=name, stage=stage, share_pct=100.0 * t / total))
    return tuple(sorted(rows, key=lambda r: -r.share_pct)[:TOP])


def join(kind: str, windows: list[tuple[int, int]], stacks: list[TimedStack],
         spans: list[Span]) -> JoinDetail:
    """Join one set of windows (``kind``: gpu_gaps, torch_gaps, slow_requests, slow_steps); its
    ``headline`` is the caller's (``headline``)."""
    if not windows:
        return JoinDetail(kind=kind, windows=0)
    a = np.array(windows, np.int64)
    ws, we = merge(a[:, 0], a[:, 1])
    got = threads_in_windows(stacks, ws, we)
    return JoinDetail(kind=kind, windows=len(windows), window_s=float((we - ws).sum()) / 1e9,
                      sampled_s=got.sampled_s, threads=got.threads, categories=got.categories,
                      functions=got.functions, spans=spans_in_windows(spans, ws, we))


def busiest_in_each(stacks: list[TimedStack], windows: list[tuple[int, int]]) -> list[str | None]:
    """For each window: "<thread>: <function> NN%" of the busiest thread's samples there, or None."""
    out: list[str | None] = []
    starts = np.array([s.start_ns for s in stacks], np.int64)
    ends = np.array([s.end_ns for s in stacks], np.int64)
    for lo, hi in windows:
        # only the stacks that overlap the window, in their order: the others add nothing
        near = [stacks[i] for i in np.flatnonzero((starts < hi) & (ends > lo)).tolist()]
        got = threads_in_windows(near, np.array([lo], np.int64), np.array([hi], np.int64))
        busy = [t for t in got.threads if t.busy_pct > 0]
        fn = busy[0].functions[0] if busy and busy[0].functions else None
        out.append(f"{busy[0].thread}: {fn.name} {fn.share_pct:.0f}%" if fn else None)
    return out


def headline(j: JoinDetail, lead: str) -> str:
    """One sentence with numbers: ``lead`` (e.g. "GPU idle 38% of the window") + what ran."""
    if not j.windows:
        return lead + "."
    parts = [lead]
    busy = [t for t in j.threads if t.busy_pct > 0]
    where = {"gpu_gaps": "during the gaps", "torch_gaps": "while no torch op ran",
             "slow_requests": "during the slowest requests", "slow_steps": "during the slowest steps"}[j.kind]
    if not j.threads:
        parts.append(f"{where} no py-spy samples were taken")
    elif not busy:
        parts.append(f"{where} every sampled thread was idle (waiting for work, IO or another process)")
    else:
        t = busy[0]
        fn = t.functions[0] if t.functions else None
        cat = next((c for c in t.categories if c.name not in PARKED), None)
        what = f"in `{fn.name}` {fn.share_pct:.0f}% of samples" if fn else "busy"
        kind = f" ({cat.name} {cat.share_pct:.0f}%)" if cat else ""
        parts.append(f"{where} thread {t.thread} was {what}{kind}")
    if j.spans:
        sp = j.spans[0]
        parts[-1] += f", inside span `{sp.span}` ({sp.share_pct:.0f}% of that time)"
    return "; ".join(parts) + "."


__all__ = ["Sampled", "TimedStack", "busiest_in_each", "headline", "join", "spans_in_windows", "threads_in_windows"]

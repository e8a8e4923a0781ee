"""TraceView: one trace split into the event sets the analyzers share, classified once.

GPU timeline events are kernels, memcpy/memset and the stream-bound ``cuda_sync`` events (the
set Holistic Trace Analysis calls GPU events: everything with a CUDA stream). Each GPU event is
linked to the host call that enqueued it: by its ``correlation`` arg, or where a trace lacks it,
through the CPU-to-GPU flow events (``ac2g``, older ``async_cpu_to_gpu``/``async``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from diagnose.catalogs.kernels import (
    DEFAULT_CATEGORY,
    KERNEL_CATALOG,
    LAUNCH_CALLS,
    PROFILER_STEP,
    SYNC_CALLS,
    TEMPORAL_NON_COMPUTE,
)
from diagnose.traces.reader import KinetoTrace
from diagnose.traces.schema import FLOW_END, FLOW_START, Table

CATEGORIES = tuple(p.category for p in KERNEL_CATALOG) + (DEFAULT_CATEGORY.category,)
GROUP_OF = {p.category: p.group for p in (*KERNEL_CATALOG, DEFAULT_CATEGORY)}


@dataclass(frozen=True)
class TraceView:
    trace: KinetoTrace
    gpu: Table  # GPU timeline events sorted by start_ns
    category: np.ndarray  # index into CATEGORIES per GPU event
    temporal_compute: np.ndarray  # bool per GPU event: compute by HTA's definition
    launch_row: np.ndarray  # row in ``runtime`` of the enqueuing call, -1 if unknown
    runtime: Table  # cuda_runtime / cuda_driver calls sorted by start_ns
    cpu: Table  # cpu_op + user_annotation, sorted by start_ns

    @property
    def names(self) -> tuple[str, ...]:
        return self.trace.names

    def name(self, nid: int) -> str:
        return self.trace.names[nid]

    def name_mask(self, table: Table, pattern: str | re.Pattern) -> np.ndarray:
        """Rows of ``table`` whose name matches ``pattern`` (re.search)."""
        hits = _matching_ids(self.trace.names, pattern)
        return np.isin(table["name"], hits)

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu) > 0


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


# The catalog is fixed: compiled once at import (cold, its ~25 patterns cost ~9 ms, a quarter of
# the whole analysis of a small trace).
_CATALOG_RX = tuple(re.compile(p.pattern) for p in KERNEL_CATALOG)
_NON_COMPUTE_RX = re.compile(TEMPORAL_NON_COMPUTE)
_LAUNCH_RX, _SYNC_RX, _STEP_RX = (re.compile(p) for p in (LAUNCH_CALLS, SYNC_CALLS, PROFILER_STEP))


# Names are matched on their first MATCH_CHARS characters: the words that classify a kernel or
# call come first, and a pattern with ``.*`` stays cheap on a hostile 4,096-character name.
MATCH_CHARS = 512


def _matching_ids(names: tuple[str, ...], pattern: str | re.Pattern) -> np.ndarray:
    rx = _compiled(pattern) if isinstance(pattern, str) else pattern
    return np.fromiter((i for i, n in enumerate(names) if rx.search(n, 0, MATCH_CHARS)), np.int64)


def _classify_names(names: tuple[str, ...], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per name id (only ``ids`` are looked at): catalog category index, and HTA's compute test."""
    cats = np.full(len(names), len(CATEGORIES) - 1, np.int16)
    compute = np.ones(len(names), bool)
    for i in ids.tolist():
        n = names[i][:MATCH_CHARS]
        cats[i] = next((ci for ci, rx in enumerate(_CATALOG_RX) if rx.search(n)), cats[i])
        compute[i] = not _NON_COMPUTE_RX.search(n)
    return cats, compute


def _link(gpu: Table, runtime: Table, flows: Table) -> np.ndarray:
    """Row of the enqueuing runtime call for each GPU event (-1 when unknown)."""
    out = np.full(len(gpu), -1, np.int64)
    rc = runtime["correlation"]
    valid = np.flatnonzero(rc >= 0)
    if len(valid):
        order = valid[np.argsort(rc[valid], kind="stable")]
        keys = rc[order]
        pos = np.searchsorted(keys, gpu["correlation"])
        pos_c = np.minimum(pos, len(keys) - 1)
        hit = (gpu["correlation"] >= 0) & (keys[pos_c] == gpu["correlation"])
        out[hit] = order[pos_c[hit]]
    missing = np.flatnonzero(out < 0)
    if len(missing) and len(flows):
        out[missing] = _link_by_flows(gpu.take(missing), runtime, flows)
    return out


def _link_by_flows(gpu: Table, runtime: Table, flows: Table) -> np.ndarray:
    """Flow end at (device, stream, kernel start) -> flow id -> flow start inside a runtime call."""
    out = np.full(len(gpu), -1, np.int64)
    ends = {(int(p), int(t), int(ts)): int(i) for p, t, ts, i, ph in zip(
        flows["pid"], flows["tid"], flows["t_ns"], flows["id"], flows["phase"]) if ph == FLOW_END}
    starts = {int(i): (int(p), int(t), int(ts)) for p, t, ts, i, ph in zip(
        flows["pid"], flows["tid"], flows["t_ns"], flows["id"], flows["phase"]) if ph == FLOW_START}
    by_thread: dict[tuple[int, int], np.ndarray] = {}
    for row, (p, t, ts) in enumerate(zip(gpu["pid"], gpu["tid"], gpu["start_ns"])):
        fid = ends.get((int(p), int(t), int(ts)))
        src = starts.get(fid) if fid is not None else None
        if src is None:
            continue
        rows = by_thread.get(src[:2])
        if rows is None:
            rows = by_thread[src[:2]] = np.flatnonzero(
                (runtime["pid"] == src[0]) & (runtime["tid"] == src[1]))
        k = np.searchsorted(runtime["start_ns"][rows], src[2], side="right") - 1
        if k >= 0 and runtime["end_ns"][rows[k]] >= src[2]:
            out[row] = rows[k]
    return out


def build_view(trace: KinetoTrace) -> TraceView:
    """Classify GPU event names and link each GPU event to its launch; the tables are shared."""
    gpu = trace.gpu
    name_cat, name_compute = _classify_names(trace.names, np.unique(gpu["name"]))
    return TraceView(trace, gpu, name_cat[gpu["name"]], name_compute[gpu["name"]],
                     _link(gpu, trace.runtime, trace.flows), trace.runtime, trace.cpu)


def steps(view: TraceView) -> list[tuple[int, int, int]]:
    """ProfilerStep#N intervals on the host: (step number, start_ns, end_ns), by start."""
    rx = _STEP_RX
    number = {i: int(m.group(1)) for i, n in enumerate(view.trace.names) if (m := rx.match(n))}
    if not number:
        return []
    rows = np.flatnonzero(np.isin(view.cpu["name"], list(number)))
    return [(number[int(n)], int(s), int(e)) for n, s, e in zip(
        view.cpu["name"][rows], view.cpu["start_ns"][rows], view.cpu["end_ns"][rows])]


def launch_mask(view: TraceView) -> np.ndarray:
    return view.name_mask(view.runtime, _LAUNCH_RX)


def sync_mask(view: TraceView) -> np.ndarray:
    return view.name_mask(view.runtime, _SYNC_RX)


__all__ = ["CATEGORIES", "GROUP_OF", "TraceView", "build_view", "launch_mask", "steps", "sync_mask"]

"""Span analytics: request latency distribution, QPS, concurrency, stage breakdown (pure).

Input is the SPANS stream's records (diagnose/bundle/records/spans.py SpanRecord; written by the in-process agent,
the OTLP receiver or the importer). A *request* is a root span: no parent, or a parent that is not in
the capture (its caller lives in another process). Latency percentiles use numpy's linear
interpolation. Stage shares are the time each stage (catalogs/stages.py) was open inside the
requests, over the requests' total time: ``sum_requests(stage time) / sum_requests(latency)``.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from diagnose.bundle.records.spans import SpanRecord
from diagnose.catalogs.stages import STAGE_CATALOG, STAGES
from diagnose.signals.spans.lifetime import RULE, lifetime_mask
from diagnose.traces.intervals import merge, overlap_each

if TYPE_CHECKING:
    from diagnose.bundle import Bundle

PERCENTILES = (50, 90, 95, 99, 99.9)
MAX_GROUPS = 10
# A span of the analysis: a SPANS record the reader found complete (``reject`` None).
Span = SpanRecord


@dataclass(frozen=True)
class Request:
    """A root span with the time each stage was open inside it (ns)."""

    span: Span
    stage_ns: dict[str, int]


@dataclass
class SpanSet:
    spans: list[Span]
    invalid: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    lifetime: list[Request] = field(default_factory=list)  # server-lifetime roots (lifetime.py), not requests


def parsed_sample(bundle: Bundle) -> SpanSet:
    """The spans of the bundle's final sample (sampling.py in_sample), parsed once per bundle: the
    timeline source and the thread account's open requests both read them (read-only)."""
    from diagnose.signals.spans.sampling import sample_of

    return bundle.derived("spans.parsed_sample", lambda: parse_spans(sample_of(bundle)[0]))


def parse_spans(records: Iterable[SpanRecord]) -> SpanSet:
    """The spans of the SPANS records (``Bundle.typed(SPANS)``); those the reader rejected (no end,
    ending before they start, longer than 24 h: records/spans.py REJECTS) are counted by reason in
    ``invalid`` and left out. Root spans are the ``requests``, except server-lifetime ones
    (``lifetime``, by lifetime.RULE)."""
    out: list[Span] = []
    invalid: defaultdict[str, int] = defaultdict(int)
    for r in records:
        if r.reject is None:
            out.append(r)
        else:
            invalid[r.reject] += 1
    ss = SpanSet(out, dict(invalid))
    roots = _requests(out)
    long = lifetime_mask(np.array([r.span.start_ns for r in roots], np.int64),
                         np.array([r.span.end_ns for r in roots], np.int64))
    ss.requests = [r for r, x in zip(roots, long) if not x]
    ss.lifetime = [r for r, x in zip(roots, long) if x]
    return ss


@lru_cache(maxsize=4096)
def _stage(name: str, kind: str, keys: frozenset[str]) -> str | None:
    for p in STAGE_CATALOG:
        if p.kind and p.kind != kind:
            continue
        if p.attribute and p.attribute not in keys:
            continue
        if p.name and not re.search(p.name, name):
            continue
        return p.stage
    return None


def stage_of(span: Span) -> str | None:
    return _stage(span.name, span.kind, frozenset(span.attributes))


SMALL_UNION = 64


Key = tuple[str, str]  # (trace_id, span_id)


def _requests(spans: list[Span]) -> list[Request]:
    """The root spans with their stages' time. Span ids come from the target, which may repeat them:
    roots sharing an id share its descendants, and a span reached from roots of several ids counts
    in the first one's only, so a stream of repeated ids costs time linear in its spans (walking
    every root's descendants span by span was quadratic: minutes for 100k spans)."""
    ids = {(s.trace_id, s.span_id) for s in spans}
    children: dict[Key, list[Span]] = defaultdict(list)
    roots: dict[Key, list[Span]] = defaultdict(list)
    order: list[Span] = []
    for s in spans:
        if s.parent_span_id and (s.trace_id, s.parent_span_id) in ids:
            children[(s.trace_id, s.parent_span_id)].append(s)
        else:
            roots[(s.trace_id, s.span_id)].append(s)
            order.append(s)
    expanded: set[Key] = set()
    stage_ns: dict[int, dict[str, int]] = {}
    for key, same in roots.items():
        by_stage: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for s in _family(key, children, expanded):
            st = stage_of(s)
            if st:
                by_stage[st].append((s.start_ns, s.end_ns))
        if len(same) == 1:
            lo, hi = same[0].start_ns, same[0].end_ns
            stage_ns[id(same[0])] = {st: _union([(max(a, lo), min(b, hi)) for a, b in iv])
                                     for st, iv in by_stage.items()}
        else:
            stage_ns.update(_shared_stages(same, by_stage))
    return [Request(root, stage_ns[id(root)]) for root in order]


def _family(key: Key, children: dict[Key, list[Span]], expanded: set[Key]) -> list[Span]:
    """The descendants of the spans with id ``key`` (a cycle of parents ends), each id's children taken
    once: those of an id in ``expanded`` (another request's) are left out."""
    out: list[Span] = []
    todo = [key]
    while todo:
        k = todo.pop()
        if k in expanded:
            continue
        expanded.add(k)
        kids = children.get(k, ())
        out.extend(kids)
        todo.extend((s.trace_id, s.span_id) for s in kids)
    return out


def _shared_stages(roots: list[Span], by_stage: dict[str, list[tuple[int, int]]]) -> dict[int, dict[str, int]]:
    """Per root (by id()) of several sharing one span id: each stage's time inside it, from the union of
    the family's intervals merged once (the union of the clipped intervals is the clipped union)."""
    lo = np.array([r.start_ns for r in roots], np.int64)
    hi = np.array([r.end_ns for r in roots], np.int64)
    per_stage = {}
    for st, iv in by_stage.items():
        a = np.array(iv, np.int64)
        s, e = merge(a[:, 0], np.maximum(a[:, 1], a[:, 0]))
        per_stage[st] = overlap_each(s, e, lo, hi)
    return {id(r): {st: int(v[i]) for st, v in per_stage.items()} for i, r in enumerate(roots)}


def _union(iv: list[tuple[int, int]]) -> int:
    """Total length (ns) of the union of [start, end) intervals (an end before its start: empty)."""
    if len(iv) <= SMALL_UNION:  # a request's few stage spans: plain Python beats numpy's per-call cost 10x
        total, hi = 0, None
        for lo, end in sorted(iv):
            end = max(end, lo)
            if hi is None or lo > hi:
                total += end - lo
                hi = end
            elif end > hi:
                total += end - hi
                hi = end
        return total
    a = np.array(iv, np.int64)
    s, e = merge(a[:, 0], np.maximum(a[:, 1], a[:, 0]))
    return int((e - s).sum())


def latency_stats(dur_ns: np.ndarray) -> dict[str, Any]:
    if not len(dur_ns):
        return {"count": 0}
    p = np.percentile(dur_ns, PERCENTILES) / 1e6
    return {"count": int(len(dur_ns)), "mean_ms": float(dur_ns.mean() / 1e6),
            **{f"p{str(q).replace('.', '')}_ms": float(v) for q, v in zip(PERCENTILES, p)},
            "max_ms": float(dur_ns.max() / 1e6)}


def concurrency(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> dict[str, float | None]:
    """In-flight requests over [lo, hi): time-average and peak, from a sweep of starts/ends."""
    if hi <= lo or not len(starts):
        return {"mean": None, "max": None}
    s, e = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    t = np.concatenate([s, e])
    d = np.concatenate([np.ones(len(s), np.int64), -np.ones(len(e), np.int64)])
    order = np.lexsort((d, t))  # at equal times, ends (-1) before starts
    t, n = t[order], np.cumsum(d[order])
    mean = float((n[:-1] * np.diff(t)).sum() / (hi - lo))
    return {"mean": mean, "max": float(n.max())}


def excluded(ss: SpanSet) -> dict[str, Any] | None:
    """The server-lifetime root spans left out of the request statistics: count, rule, longest (s)."""
    if not ss.lifetime:
        return None
    return {"count": len(ss.lifetime), "rule": RULE,
            "longest_s": max(r.span.dur_ns for r in ss.lifetime) / 1e9,
            "names": sorted({r.span.name for r in ss.lifetime})[:MAX_GROUPS]}


def _concurrency_over(starts: np.ndarray, ends: np.ndarray,
                      parts: tuple[tuple[int, int], ...]) -> dict[str, float | None]:
    """``concurrency`` over several disjoint parts: the time-weighted mean, the largest peak."""
    each = [(b - a, concurrency(starts, ends, a, b)) for a, b in parts if b > a]
    known = [(w, c) for w, c in each if c["mean"] is not None]
    if not known:
        return {"mean": None, "max": None}
    total = sum(w for w, _ in known)
    return {"mean": sum(w * (c["mean"] or 0.0) for w, c in known) / total,
            "max": max(c["max"] or 0.0 for _, c in known)}


def request_summary(ss: SpanSet, window: tuple[int, int] | None,
                    covered: tuple[tuple[int, int], ...] | None = None, scale: float = 1.0) -> dict[str, Any]:
    """Latency, QPS, concurrency vs Little's law, stage shares, per root name. Server-lifetime
    roots are not requests (``lifetime_excluded`` says how many and why).

    ``covered``: the parts of the window the spans cover when a producer dropped some
    (signals/spans/coverage.py): only requests ending there count, QPS is per covered second and
    concurrency the time-average over the covered parts; ``window_s`` is then the covered time.
    ``scale``: N when the spans are a 1-in-N sample of whole traces (signals/spans/sampling.py):
    QPS and in-flight requests (measured and by Little's law) are the sample's times N and
    ``requests_estimated`` says the count; ``requests``, the latency and the stage shares stay the
    sample's."""
    reqs = ss.requests
    if covered is not None:
        reqs = [r for r in reqs if any(a <= r.span.end_ns <= b for a, b in covered)]
    if not reqs:
        return {"requests": 0, "lifetime_excluded": excluded(ss)}
    dur = np.array([r.span.dur_ns for r in reqs], np.int64)
    starts = np.array([r.span.start_ns for r in reqs], np.int64)
    ends = starts + dur
    lo, hi = window if window else (int(starts.min()), int(ends.max()))
    parts = covered if covered is not None else ((lo, hi),)
    span_s = sum(b - a for a, b in parts) / 1e9
    done = int(sum(((ends >= a) & (ends <= b)).sum() for a, b in parts))
    # no request ended inside the window: the spans' clock is not the capture's (or they are of another
    # time), and "0 QPS" next to their latencies would be a measurement of nothing
    outside = done == 0 and window is not None
    qps = done * scale / span_s if span_s > 0 and not outside else None
    conc = {k: v * scale if v is not None and not outside else None
            for k, v in _concurrency_over(starts, ends, parts).items()}
    little = qps * dur.mean() / 1e9 if qps is not None else None
    total = int(dur.sum())
    stage_total = {st: sum(r.stage_ns.get(st, 0) for r in reqs) for st in STAGES}
    sampled = {"requests_estimated": len(reqs) * scale, "sampled_one_in": round(scale)} if scale != 1.0 else {}
    return {
        "requests": len(reqs), **sampled, "window_s": span_s, "qps": qps,
        "latency": latency_stats(dur),
        "errors": sum(1 for r in reqs if r.span.status == "error"),
        "in_flight_measured_mean": conc["mean"], "in_flight_measured_max": conc["max"],
        "in_flight_littles_law": little,
        "stage_share_pct": {st: 100.0 * v / total if total else None for st, v in stage_total.items()},
        "unstaged_pct": 100.0 * max(0, total - sum(stage_total.values())) / total if total else None,
        "by_name": _by_name(reqs),
        "lifetime_excluded": excluded(ss),
        **({"ended_outside_window": len(reqs)} if outside else {}),
    }


def _by_name(reqs: list[Request]) -> list[dict[str, Any]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for r in reqs:
        groups[r.span.name].append(r.span.dur_ns)
    top = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:MAX_GROUPS]
    return [{"name": k, **latency_stats(np.array(v, np.int64))} for k, v in top]


__all__ = ["Request", "Span", "SpanSet", "concurrency", "excluded", "latency_stats", "parse_spans",
           "request_summary", "stage_of"]

"""Which part of the capture window the recorded spans cover (pure).

A span producer can drop spans: the in-process agent drops those that end while its queue is full
(a target ending spans faster than the agent's capture thread writes them). Its manifest counts say
how many (``spans_dropped``) and in which stretches their end times fell
(``spans_dropped_ranges_ns``, [first, last] Unix ns per run of drops). Request statistics (QPS,
latency, concurrency) are then computed over the covered part of the window only: the window
minus those stretches. A producer that dropped spans without saying when leaves the range the kept
spans span (``spans_first_start_ns`` .. ``spans_last_end_ns``, else the spans themselves) as the
covered part.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnose.bundle.records.manifest import CollectorCounts, CollectorEntry
from diagnose.results.quality import SpansCoverage
from diagnose.signals.spans.analytics import Span
from diagnose.traces.intervals import merge

MAX_RANGES = 1024
Interval = tuple[int, int]


@dataclass(frozen=True)
class SpanCoverage:
    """``gaps``: stretches of ``window`` (Unix ns) whose spans were dropped, merged and ordered;
    ``kept``: the first start and last end of the spans kept; ``ranges_known``: the producers said
    when they dropped (else the gaps are the window outside ``kept``)."""

    window: Interval
    dropped: int
    gaps: tuple[Interval, ...]
    kept: Interval | None
    ranges_known: bool
    producers: tuple[str, ...] = ()  # the collectors that dropped spans

    @property
    def window_s(self) -> float:
        return (self.window[1] - self.window[0]) / 1e9

    @property
    def covered(self) -> tuple[Interval, ...]:
        """The window minus the gaps, in order."""
        out, t = [], self.window[0]
        for a, b in self.gaps:
            if a > t:
                out.append((t, a))
            t = max(t, b)
        if t < self.window[1]:
            out.append((t, self.window[1]))
        return tuple(out)

    @property
    def covered_s(self) -> float:
        return sum(b - a for a, b in self.covered) / 1e9

    def statement(self) -> str:
        where = ("" if self.ranges_known else ", which did not say when: the range the kept spans span is taken as "
                 "covered")
        kept = (f" (kept spans from +{(self.kept[0] - self.window[0]) / 1e9:.2f} s to "
                f"+{(self.kept[1] - self.window[0]) / 1e9:.2f} s)" if self.kept else "")
        who = ", ".join(f"the {p}" for p in self.producers) or "their producer"
        full = " (its span queue was full)" if self.producers == ("agent",) else ""
        return (f"{self.dropped:,} spans were dropped by {who}{full}{where}; the kept "
                f"spans cover {self.covered_s:.2f} s of the {self.window_s:.2f} s recorded "
                f"({100 * self.covered_s / self.window_s:.0f}%){kept}: QPS, latency and concurrency are computed "
                f"over the covered {self.covered_s:.2f} s only")

    def quality(self) -> SpansCoverage:
        """The figures of the data-quality section (``spans.coverage``)."""
        return SpansCoverage(
            spans_dropped=self.dropped, window_s=round(self.window_s, 3), covered_s=round(self.covered_s, 3),
            covered_share_pct=round(100 * self.covered_s / self.window_s, 1) if self.window_s else None,
            kept_first_start_ns=self.kept[0] if self.kept else None,
            kept_last_end_ns=self.kept[1] if self.kept else None, gaps_ns=tuple(self.gaps[:32]),
            drop_times_known=self.ranges_known, producers=tuple(self.producers), statement=self.statement())


def _int(v: Any) -> int | None:
    return v if type(v) is int and 0 <= v < 2**63 else None


def _ranges(counts: CollectorCounts) -> list[Interval] | None:
    raw = counts.spans_dropped_ranges_ns
    if raw is None:
        return None
    out = []
    for r in raw[:MAX_RANGES]:
        if isinstance(r, list) and len(r) == 2 and (a := _int(r[0])) is not None and (b := _int(r[1])) is not None:
            out.append((min(a, b), max(a, b)))
    return out


def _kept(counts: Iterable[CollectorCounts], spans: list[Span]) -> Interval | None:
    firsts = [c.spans_first_start_ns for c in counts if c.spans_first_start_ns is not None]
    lasts = [c.spans_last_end_ns for c in counts if c.spans_last_end_ns is not None]
    if spans:
        firsts.append(min(s.start_ns for s in spans))
        lasts.append(max(s.end_ns for s in spans))
    return (min(firsts), max(lasts)) if firsts and lasts else None


def _clip(iv: Iterable[Interval], window: Interval) -> tuple[Interval, ...]:
    lo, hi = window
    pieces = [(max(a, lo), min(b, hi)) for a, b in iv if b >= lo and a <= hi]
    if not pieces:
        return ()
    s, e = merge(np.array([a for a, _ in pieces], np.int64), np.array([b for _, b in pieces], np.int64))
    return tuple((int(a), int(b)) for a, b in zip(s, e))


def _recorded(window: Interval, counts: list[CollectorCounts]) -> Interval:
    """The capture window cut to when the dropping producers recorded (``spans_window_ns``: the
    agent starts after the capture and stops before it)."""
    lo, hi = window
    for c in counts:
        if c.spans_window_ns is not None and max(lo, c.spans_window_ns[0]) < min(hi, c.spans_window_ns[1]):
            lo, hi = max(lo, c.spans_window_ns[0]), min(hi, c.spans_window_ns[1])
    return lo, hi


def recording_window(collectors: Iterable[CollectorEntry], window: Interval | None,
                     sources: set[str]) -> Interval | None:
    """The capture ``window`` cut to when the span producers recorded, when every producer of the
    spans (``sources``: the records' ``source``) is a collector that says when (``spans_window_ns``:
    the agent starts after the capture and stops before it); else ``window`` itself. Request
    statistics over the whole capture window would count its first and last moments as seconds
    without requests."""
    if window is None or not sources:
        return window
    said = {c.name: w for c in collectors if (w := c.counts_as(CollectorCounts).spans_window_ns) is not None}
    if not sources <= said.keys():
        return window
    lo, hi = max(window[0], min(said[s][0] for s in sources)), min(window[1], max(said[s][1] for s in sources))
    return (lo, hi) if hi > lo else window


def span_coverage(collectors: Iterable[CollectorEntry], window: Interval | None,
                  spans: list[Span]) -> SpanCoverage | None:
    """The coverage of the capture ``window`` by the spans kept, from the manifest's collector
    entries; None when no producer dropped a span or there is no window."""
    entries = [(c.name, c.counts_as(CollectorCounts)) for c in collectors]
    counts = [c for _, c in entries]
    dropping = [c for c in counts if (c.spans_dropped or 0) > 0]
    if window is None or window[1] <= window[0] or not dropping:
        return None
    producers = tuple(name for name, c in entries if (c.spans_dropped or 0) > 0)
    dropped = sum(c.spans_dropped or 0 for c in dropping)
    window = _recorded(window, dropping)
    kept = _kept(counts, spans)
    ranges = [_ranges(c) for c in dropping]
    known = all(r for r in ranges)
    if known:
        gaps = _clip((iv for r in ranges for iv in r or ()), window)
    else:  # the producer said how many, not when: covered is what the kept spans span
        gaps = _clip(((window[0], kept[0]), (kept[1], window[1])) if kept else (window,), window)
    return SpanCoverage(window, dropped, gaps, kept, known, producers)


__all__ = ["SpanCoverage", "recording_window", "span_coverage"]

"""The agent's per-span budget: how much of one core its span work may take, and the head sampling
by trace id that keeps it there. Pure, standard library only (runs inside the target).

Recording a span costs the target twice: the hook on the application's own thread when the span
ends (spans.SpanSink: a compare and an append, O(1)) and, on the agent's capture thread, the
conversion to a record and its write (20-40 us a span on this CPU, holding the GIL). The second
grows with the span rate: at ~35k spans/s it took half of a GIL-bound target's throughput. So the
capture thread measures its own CPU time in span work (``time.thread_time`` around each batch) and
reviews, at most every REVIEW_S, what the spans ending now would cost at the current keep fraction
(measured CPU per converted span x the rate spans end at x the fraction: the cost of the spans
arriving, not of a backlog queued before the last review). While that is over SPAN_CPU_SHARE of
one core the fraction is halved, never below MIN_KEEP_FRACTION. The hook's own cost on the
application's threads (about a microsecond a span) is not in the budget: it does not grow with
anything but the span rate, and sampling does not remove it.

Which spans are kept: a trace is kept iff the low 64 bits of its id fall below fraction x 2^64
(OpenTelemetry's TraceIdRatioBased rule; W3C trace ids are random there). The decision is read from
the id alone, so the hook makes it at span end without converting anything, every span of a trace
gets the same one, and a lower fraction keeps a subset of what a higher one kept. The fraction only
falls, so the traces under the *final* fraction were kept whole through the whole capture: the
analysis keeps those (a uniform 1-in-N sample of the traces, whole) and scales counts and rates by N
(diagnose/signals/spans/sampling.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

SPAN_CPU_SHARE = 0.005
"""The most of one core (as a fraction, 0.005 = 0.5%) the agent's span work (converting and writing
spans on its capture thread) may take. On a GIL-bound service the share is taken from its
throughput, plus the GIL handoffs the capture thread's holds bring (benchmarks/agent_cpu_per_request.py).
At 1% the demo's closed loop with spans alone kept 0.89-0.97x of its throughput in five runs, at 0.5%
0.95x and 0.97x in two (benchmarks/overhead.py; its traces kept 1 in 32 instead of 1 in 16)."""

MIN_KEEP_FRACTION = 1 / 256
"""The fewest traces kept (1 in 256): past it the budget gives way rather than the sample (spans
that still do not fit are dropped when the queue fills, and the report says where)."""

REVIEW_S = 0.1  # the least time between two reviews: a rate over a shorter stretch is noise
KEY_BITS = 64
KEY_MASK = (1 << KEY_BITS) - 1
KEEP_ALL = 1 << KEY_BITS  # the bound that keeps every trace
MAX_LEVEL = 8  # log2(1 / MIN_KEEP_FRACTION): the number of halvings allowed


def trace_key(trace_id: int) -> int:
    """The part of a trace id (int, 128 bits) the sampler compares: its low 64 bits."""
    return trace_id & KEY_MASK


def keep_bound(fraction: float) -> int:
    """Keep a trace iff ``trace_key(id) < keep_bound(fraction)``; ``fraction`` in (0, 1]."""
    return int(fraction * KEEP_ALL)


def hex_kept(trace_id_hex: str, fraction: float) -> bool:
    """The same decision from a record's trace id (32 hex chars, as the SPANS stream holds it).
    Raises ValueError when it is not hex."""
    return int(trace_id_hex[-16:], 16) < keep_bound(fraction)


def level(key: int) -> int:
    """How many halvings of the fraction a trace with this key survives (0..MAX_LEVEL)."""
    return min(MAX_LEVEL, KEY_BITS - key.bit_length())


@dataclass
class SpanBudget:
    """The keep fraction of one capture and what its span work cost.

    Threading: used by the capture thread only; the hook reads ``bound`` through the sink, which
    the capture thread updates after each review (a plain int attribute: read and written whole).
    Times: ``*_ns`` Unix ns, CPU in seconds of one thread."""

    start_ns: int
    share: float = SPAN_CPU_SHARE
    fraction: float = 1.0
    cpu_s: float = 0.0  # span work so far: conversion, writing, and the filter of queued spans
    convert_cpu_s: float = 0.0  # conversion and writing alone: the cost per span
    converted: int = 0  # spans converted so far (those the fraction kept when they were taken)
    history: list[tuple[int, float]] = field(default_factory=list)  # (Unix ns, fraction) at each change
    _review_ns: int = 0
    _review_seen: int = 0

    def __post_init__(self) -> None:
        self.history = [(self.start_ns, self.fraction)]
        self._review_ns = self.start_ns

    @property
    def bound(self) -> int:
        return keep_bound(self.fraction)

    @property
    def one_in(self) -> int:
        """N of "1 in N" (the fraction is a power of two)."""
        return round(1 / self.fraction)

    def charge(self, convert_cpu_s: float, converted: int, other_cpu_s: float = 0.0) -> None:
        """One batch of span work: ``converted`` spans converted and written in ``convert_cpu_s``
        of this thread's CPU, plus ``other_cpu_s`` taking and filtering the batch."""
        self.convert_cpu_s += max(0.0, convert_cpu_s)
        self.cpu_s += max(0.0, convert_cpu_s) + max(0.0, other_cpu_s)
        self.converted += converted

    def review(self, now_ns: int, seen: int) -> bool:
        """Halve the fraction while the spans ending now would cost more than ``share`` of a core.

        ``seen``: spans ended in the target since the capture started, kept or not. Returns True
        when the fraction fell. Does nothing before REVIEW_S has passed since the last review or
        before a span was converted (no cost measured yet)."""
        wall_s = (now_ns - self._review_ns) / 1e9
        if wall_s < REVIEW_S or self.converted == 0:
            return False
        rate = max(0, seen - self._review_seen) / wall_s
        self._review_ns, self._review_seen = now_ns, seen
        predicted = self.convert_cpu_s / self.converted * rate * self.fraction
        fraction = self.fraction
        while predicted > self.share and fraction > MIN_KEEP_FRACTION:
            fraction /= 2
            predicted /= 2
        if fraction >= self.fraction:
            return False
        self.fraction = fraction
        self.history.append((now_ns, fraction))
        return True

    def cpu_share(self, now_ns: int) -> float:
        """Span work's CPU over the capture so far, as a fraction of one core."""
        wall_s = (now_ns - self.start_ns) / 1e9
        return self.cpu_s / wall_s if wall_s > 0 else 0.0


__all__ = ["KEEP_ALL", "MIN_KEEP_FRACTION", "SPAN_CPU_SHARE", "SpanBudget", "hex_kept", "keep_bound", "level",
           "trace_key"]

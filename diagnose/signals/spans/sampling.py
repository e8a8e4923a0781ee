"""Spans the in-process agent sampled to stay inside its CPU budget (pure).

The agent keeps a trace iff the low 64 bits of its id fall below keep-fraction x 2^64, and lowers
the fraction (by halving, never raising it) while its span work would take more than its share of
a core (diagnose/agent/inproc/spanbudget.py). Its manifest counts say the final fraction
(``spans_keep_fraction``), when it changed (``spans_keep_history``: [Unix ns, fraction] pairs), the
spans seen and kept, and the CPU its span work used. Spans written while the fraction was higher
include traces a later, lower fraction would not have kept whole, so the analysis keeps the agent's
spans of the traces under the *final* fraction only: a uniform sample of whole traces over the
whole window, 1 in N. Counts and rates (requests, QPS, in-flight, tokens) are scaled by N;
latency percentiles and stage shares are read from the sample as they are.

Sampled-out spans are not dropped ones (signals/spans/coverage.py): the window stays covered.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diagnose.agent.inproc.spanbudget import MIN_KEEP_FRACTION, hex_kept
from diagnose.bundle.records.manifest import CollectorCounts, ManifestInfo, manifest_info
from diagnose.bundle.records.spans import SpanRecord
from diagnose.bundle.streams import SPANS
from diagnose.results.quality import SpansSampling

if TYPE_CHECKING:
    from diagnose.bundle import Bundle

PRODUCER = "agent"  # the only span producer that samples
MAX_HISTORY = 64


@dataclass(frozen=True)
class SpanSampling:
    """``fraction``: the agent's final keep fraction (a power of two, 1/256 .. 1/2); ``history``:
    (Unix ns, fraction) at each change; ``seen``/``kept``: spans ended in the target during the
    capture and spans in the final sample, by the agent's count; ``left_out``: spans in the stream
    the analysis left out (written under a higher fraction); CPU: the agent's span work (s, and
    % of one core over its capture, against ``budget_pct``)."""

    fraction: float
    history: tuple[tuple[int, float], ...]
    seen: int | None
    kept: int | None
    left_out: int
    cpu_s: float | None
    cpu_pct: float | None
    budget_pct: float | None

    @property
    def one_in(self) -> int:
        return round(1 / self.fraction)

    @property
    def scale(self) -> float:
        return 1 / self.fraction

    def statement(self) -> str:
        budget = f"within {self.budget_pct:g}% of a core" if self.budget_pct is not None else "within its CPU budget"
        seen = f"{self.seen:,} spans ended in the target, {self.kept:,} kept; " if self.seen and self.kept else ""
        cost = f" (its span work used {self.cpu_pct:.1f}% of a core)" if self.cpu_pct is not None else ""
        return (f"spans were sampled 1 in {self.one_in} by the agent, by trace id (whole traces kept), to keep its "
                f"span work {budget}{cost}: {seen}request counts, QPS and in-flight requests are the sample's "
                f"scaled by {self.one_in}; latency percentiles and stage shares are the sample's")

    def quality(self) -> SpansSampling:
        """The figures of the data-quality section (``spans.sampling``)."""
        return SpansSampling(
            one_in=self.one_in, keep_fraction=self.fraction, history=self.history, spans_seen=self.seen,
            spans_kept=self.kept, spans_left_out=self.left_out, agent_span_cpu_s=self.cpu_s,
            agent_span_cpu_pct=self.cpu_pct, agent_span_cpu_budget_pct=self.budget_pct, statement=self.statement())


def _fraction(v: float | None) -> float | None:
    """A keep fraction the agent can have chosen: 1 / 2^k, k in 0..8 (anything else is not one)."""
    if v is None or not MIN_KEEP_FRACTION <= v <= 1:
        return None
    k = round(1 / v).bit_length() - 1
    return 1 / 2**k if abs(v * 2**k - 1) < 1e-9 else None


def _count(v: Any) -> int | None:
    return v if type(v) is int and 0 <= v < 2**63 else None


def _history(raw: list[Any]) -> tuple[tuple[int, float], ...]:
    out = []
    for h in raw[:MAX_HISTORY]:
        if isinstance(h, list) and len(h) == 2 and (t := _count(h[0])) is not None and (f := _number(h[1])):
            out.append((t, f))
    return tuple(out)


def _number(v: Any) -> float | None:
    return _fraction(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def agent_sampling(collectors: Iterable[Any]) -> SpanSampling | None:
    """The agent's sampling from the manifest's collector entries as JSON holds them (see sampling_of)."""
    return sampling_of(manifest_info({"collectors": list(collectors)}))


def sampling_of(info: ManifestInfo) -> SpanSampling | None:
    """The agent's sampling from its collector's counts; None when it kept every trace (or said
    nothing readable about it)."""
    agent = info.collector(PRODUCER)
    if agent is None:
        return None
    c = agent.counts_as(CollectorCounts)
    fraction = _fraction(c.spans_keep_fraction)
    if fraction is None or fraction >= 1:
        return None
    return SpanSampling(fraction, _history(c.spans_keep_history), c.spans_seen, c.spans_kept, 0, c.spans_cpu_s,
                        c.spans_cpu_pct, c.spans_cpu_budget_pct)


def sample_of(bundle: Bundle) -> tuple[list[SpanRecord], int, SpanSampling | None]:
    """The bundle's span records in the final sample, how many of the agent's were left out, and the
    sampling (None: every span kept); once per bundle."""
    def build() -> tuple[list[SpanRecord], int, SpanSampling | None]:
        sampling = sampling_of(bundle.info)
        records, left = in_sample(bundle.typed(SPANS), sampling)
        return records, left, sampling
    return bundle.derived("spans.in_sample", build)


def in_sample(records: Iterable[SpanRecord], sampling: SpanSampling | None) -> tuple[list[SpanRecord], int]:
    """The records of the final sample: every record of other producers, the agent's only for the
    traces the final fraction keeps. Returns (records, how many of the agent's were left out). A
    record whose trace id is not hex (or absent) is kept as it is: the parser judges it."""
    kept: list[SpanRecord] = []
    if sampling is None:
        return list(records), 0
    left = 0
    for r in records:
        if r.source == PRODUCER:
            try:
                keep = hex_kept(r.trace_id, sampling.fraction)
            except ValueError:  # not hex: left to the parser
                keep = True
            if not keep:
                left += 1
                continue
        kept.append(r)
    return kept, left


__all__ = ["SpanSampling", "agent_sampling", "in_sample", "sample_of", "sampling_of"]

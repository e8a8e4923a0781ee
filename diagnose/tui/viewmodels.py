"""Frozen view-models: what each widget draws, already formatted. Built by the pure adapters.

Widgets never read an Analysis or a bundle: they get one of these, so a screen can be redrawn from
a snapshot taken in a worker thread without sharing mutable state with the capture.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuadrantCell:
    """One of the four quadrants with its score (0..1, the strongest finding's confidence)."""

    quadrant: str
    score: float
    primary: bool


@dataclass(frozen=True)
class VerdictVM:
    quadrant: str
    layer: str | None
    plan: tuple[str, ...]
    confidence: float
    headline: str
    cells: tuple[QuadrantCell, ...]  # compute, bandwidth, service, io: drawn as a 2x2 picture
    summary: str  # the headline without the "X-bound: act on ... (plan: ...)." part shown apart
    provisional: bool = False


@dataclass(frozen=True)
class EvidenceRow:
    signal: str
    value: str
    threshold: str
    source: str


@dataclass(frozen=True)
class FindingVM:
    rule_id: str
    title: str
    summary: str
    quadrant: str
    layer: str
    severity: str
    confidence: float
    evidence: tuple[EvidenceRow, ...]
    suggestions: tuple[str, ...]
    window: str  # the time window the evidence covers

    def matches(self, needle: str) -> bool:
        """Case-insensitive filter over what the list and the drill-down show."""
        if not needle:
            return True
        hay = " ".join((self.rule_id, self.title, self.summary, self.quadrant, self.layer,
                        self.severity, *(e.signal for e in self.evidence))).lower()
        return needle.lower() in hay


@dataclass(frozen=True)
class StackNodeVM:
    """A frame in the merged top-stacks tree; ``share_pct`` sums the stacks below it."""

    label: str
    share_pct: float
    category: str | None
    children: tuple[StackNodeVM, ...] = ()


@dataclass(frozen=True)
class TableVM:
    """A plain table; ``empty`` says why it has no rows ("not captured: ...")."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    empty: str = ""


@dataclass(frozen=True)
class BarVM:
    label: str
    pct: float | None
    text: str


@dataclass(frozen=True)
class BarGroupVM:
    """A family of percentage signals drawn as bars, e.g. ``spans.stage_share_pct[*]``."""

    title: str
    source: str
    bars: tuple[BarVM, ...]  # the measured members, largest first
    note: str = ""  # which members are unknown, and why


@dataclass(frozen=True)
class GapsVM:
    """GPU idle gaps: the one-sentence join headline, the gaps, and what ran meanwhile."""

    headline: str
    table: TableVM
    during: TableVM


@dataclass(frozen=True)
class ResultsVM:
    title: str
    capture: str
    verdict: VerdictVM
    account: TableVM  # where the time went: the limiting account's terms
    findings: tuple[FindingVM, ...]
    stacks: tuple[StackNodeVM, ...]
    stacks_note: str
    gaps: GapsVM
    bar_groups: tuple[BarGroupVM, ...]
    breakdown_note: str
    latency: TableVM
    collectors: TableVM
    quality: TableVM
    not_judged: TableVM
    signals: TableVM
    details: tuple[TableVM, ...]


@dataclass(frozen=True)
class CollectorChip:
    name: str
    state: str
    counts: str


@dataclass(frozen=True)
class LiveHeaderVM:
    target: str
    python: str
    elapsed_s: float
    remaining_s: float
    collectors: tuple[CollectorChip, ...]
    status: str = "capturing"  # capturing · stopping… · captured (a replayed, finished bundle)


@dataclass(frozen=True)
class Trend:
    """A sparkline's data: per-bucket values oldest first (``weights_s``: what each covers),
    drawn on a fixed 0..``hi`` scale; the widget picks the seconds per column from its width."""

    values: tuple[float, ...]
    weights_s: tuple[float, ...]
    hi: float = 100.0
    bucket_s: float = 1.0
    merge: str = "mean"  # how buckets join into a column: "mean" (weighted) or "max" (e.g. a P99)


@dataclass(frozen=True)
class MetricLine:
    """``kind``: "metric" (label, value, trend), "heading" (a label alone) or "item" (one row of
    a list: the filter applies to these)."""

    label: str
    value: str
    trend: Trend | None = None
    kind: str = "metric"


@dataclass(frozen=True)
class PanelVM:
    """``more``: lines shown only when the panel is opened full screen (the rest of each list)."""

    title: str
    lines: tuple[MetricLine, ...]
    note: str = ""  # e.g. "not captured: nvml unavailable: no NVIDIA driver"
    more: tuple[MetricLine, ...] = ()


@dataclass(frozen=True)
class LiveVM:
    cpu: PanelVM
    gpu: PanelVM
    service: PanelVM
    verdict: VerdictVM | None
    verdict_note: str
    account: PanelVM = PanelVM("Where the time went", (), "waiting for the first analysis")

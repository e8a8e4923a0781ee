"""The analysis data model: signals, findings and the verdict.

Quadrant (what limits the service) and Layer (where to act first) are two separate axes, see
DESIGN.md. Everything here is frozen and serialises to the shape of ``findings.json``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnose.bundle import Bundle


class Quadrant(str, Enum):
    """What limits the workload."""

    COMPUTE = "compute"
    BANDWIDTH = "bandwidth"
    SERVICE = "service"
    IO = "io"
    UNKNOWN = "unknown"


class Layer(str, Enum):
    """Where to act first, in the order the method tries them."""

    MODEL = "model"
    ENGINE = "engine"
    SERVICE = "service"
    SYSTEM = "system"


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


JUDGED_QUADRANTS = (Quadrant.COMPUTE, Quadrant.BANDWIDTH, Quadrant.SERVICE, Quadrant.IO)


@dataclass(frozen=True)
class Signal:
    """One measured value with its unit and provenance.

    ``value`` is None when the signal could not be measured; ``reason`` then says why. A missing
    signal is never reported as 0.
    """

    name: str
    value: float | None
    unit: str
    source: str
    reason: str | None = None

    @property
    def known(self) -> bool:
        return self.value is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "unit": self.unit, "source": self.source}
        if self.reason:
            out["reason"] = self.reason
        return out


def missing(name: str, unit: str, source: str, reason: str) -> Signal:
    return Signal(name, None, unit, source, reason)


@dataclass(frozen=True)
class Evidence:
    """A signal value that a rule compared against its threshold."""

    signal: str
    value: float
    unit: str
    op: str
    threshold: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "value": self.value,
            "unit": self.unit,
            "op": self.op,
            "threshold": self.threshold,
            "source": self.source,
        }


@dataclass(frozen=True)
class Finding:
    """A rule that fired. ``quadrant`` is None for secondary findings (data quality, notes)."""

    rule_id: str
    title: str
    summary: str
    quadrant: Quadrant | None
    layer: Layer
    severity: Severity
    confidence: float
    evidence: tuple[Evidence, ...]
    suggestions: tuple[str, ...]
    blocks_verdict: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "rule_id": self.rule_id,
            "title": self.title,
            "summary": self.summary,
            "quadrant": self.quadrant.value if self.quadrant else "secondary",
            "layer": self.layer.value,
            "severity": self.severity.value,
            "confidence": round(self.confidence, 3),
            "evidence": [e.to_json() for e in self.evidence],
            "suggestions": list(self.suggestions),
        }


@dataclass(frozen=True)
class NotJudged:
    """Something the analysis could not decide, and why."""

    what: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"what": self.what, "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    quadrant: Quadrant
    layer: Layer | None
    scores: dict[Quadrant, float]
    confidence: float
    headline: str

    def to_json(self) -> dict[str, Any]:
        return {
            "quadrant": self.quadrant.value,
            "layer": self.layer.value if self.layer else None,
            "scores": {q.value: round(s, 3) for q, s in self.scores.items()},
            "confidence": round(self.confidence, 3),
            "headline": self.headline,
        }


@dataclass(frozen=True)
class StackShare:
    """A distinct Python stack (root first) and its share of all sampled time on its thread kind."""

    thread: str
    frames: tuple[str, ...]
    category: str
    share_pct: float
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "frames": list(self.frames),
            "category": self.category,
            "share_pct": round(self.share_pct, 2),
            "seconds": round(self.seconds, 4),
        }


@dataclass(frozen=True)
class ThreadSummary:
    """One OS thread of the target over the capture (process collector + py-spy)."""

    tid: int
    name: str
    cpu_pct: float | None
    dominant_category: str | None
    sampled_s: float
    wait_state: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "tid": self.tid,
            "name": self.name,
            "cpu_pct": None if self.cpu_pct is None else round(self.cpu_pct, 1),
            "dominant_category": self.dominant_category,
            "sampled_s": round(self.sampled_s, 3),
            "wait_state": self.wait_state,
        }


@dataclass(frozen=True)
class Analysis:
    """Everything ``analyze(bundle)`` derives: the content of ``findings.json``."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    signals: dict[str, Signal]
    not_judged: tuple[NotJudged, ...]
    top_stacks: tuple[StackShare, ...] = ()
    threads: tuple[ThreadSummary, ...] = ()
    data_quality: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # JSON-ready tables per signal source

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.to_json(),
            "findings": [f.to_json() for f in self.findings],
            "signals": {k: s.to_json() for k, s in sorted(self.signals.items())},
            "not_judged": [n.to_json() for n in self.not_judged],
            "top_stacks": [s.to_json() for s in self.top_stacks],
            "threads": [t.to_json() for t in self.threads],
            "data_quality": self.data_quality,
            "details": self.details,
        }


@dataclass(frozen=True)
class Report:
    """One analysed bundle: what every command, view and renderer receives (diagnose/pipeline.py).

    ``bundle``: the opened Bundle (renderers that export streams, e.g. a trace format, read it);
    ``overrides``: the ``--thresholds`` the analysis ran with, so a re-render uses the same ones.
    """

    bundle: Bundle  # imported for type checking only: at run time the data model imports no I/O module
    analysis: Analysis
    overrides: dict[str, float] = field(default_factory=dict)

    @property
    def manifest(self) -> dict[str, Any]:
        return self.bundle.manifest

    @property
    def verdict(self) -> Verdict:
        return self.analysis.verdict

"""The analysis data model: signals, findings and the verdict.

Quadrant (what limits the service) and Layer (where to act first) are two separate axes, see
DESIGN.md. Everything here is frozen and serialises to the shape of ``findings.json``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import msgspec

from diagnose.results.details import Details, scalar
from diagnose.results.gain import BusiestThread, PredictedGain
from diagnose.results.quality import DataQuality

if TYPE_CHECKING:
    from diagnose.bundle import Bundle


class Quadrant(str, Enum):
    """What limits the workload."""

    COMPUTE = "compute"
    BANDWIDTH = "bandwidth"
    SERVICE = "service"
    IO = "io"
    NO_LOAD = "no_load"  # the threads mostly wait for work: nothing limits the service now
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


HOST = "host"  # an account term the host imposed (waiting for a core): no quadrant of the target's
STOPPED = "stopped"  # an account term of a stopped target (SIGSTOP, a debugger): frozen stacks, no work
STOPPED_READING = "the target was stopped"  # a verdict's headline for an account of frozen stacks


@dataclass(frozen=True)
class AccountTerm:
    """One part of an account: ``share`` (0..1) of the account's time, ``seconds`` of it (thread-,
    GPU- or request-seconds, the account's ``unit``). ``quadrant`` None: outside the target's
    quadrants: with no ``layer``, no load (waiting for work); with one, the host held it back
    (waiting for a core). ``rule_id``: the rule whose finding and remedies explain this term."""

    kind: str
    label: str
    share: float
    seconds: float
    quadrant: Quadrant | None
    layer: Layer | None
    evidence: str
    rule_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "share": round(self.share, 4),
                "seconds": round(self.seconds, 4),
                "quadrant": self.quadrant.value if self.quadrant else (
                    STOPPED if self.kind == STOPPED else HOST if self.layer else Quadrant.NO_LOAD.value),
                "layer": self.layer.value if self.layer else None, "evidence": self.evidence,
                "rule_id": self.rule_id}


@dataclass(frozen=True)
class Account:
    """A partition of the time one resource saw (diagnose/account/): ``resource`` is ``threads``
    (sampled thread-time), ``gpu`` (the kernel window) or ``requests`` (request time). Terms are
    sorted by share; what they leave of 1 is not attributed."""

    resource: str
    title: str
    unit: str
    total_s: float
    terms: tuple[AccountTerm, ...]
    notes: tuple[str, ...] = ()
    source: str = ""  # where every term's evidence comes from (collectors, fields)
    observations: int | None = None  # GPU events or requests behind it (thread-time: py-spy samples)
    busiest: BusiestThread | None = None  # thread-time: the busiest thread's own time by kind

    @property
    def not_attributed(self) -> float:
        return max(0.0, 1.0 - sum(t.share for t in self.terms))

    def shares(self) -> dict[Quadrant, float]:
        """Share per quadrant; NO_LOAD for waiting for work; host terms count in neither."""
        out: dict[Quadrant, float] = {}
        for t in self.terms:
            if t.quadrant is None and t.layer is not None:
                continue
            q = t.quadrant or Quadrant.NO_LOAD
            out[q] = out.get(q, 0.0) + t.share
        return out

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "title": self.title, "unit": self.unit, "source": self.source,
                "total_s": round(self.total_s, 4), "terms": [t.to_json() for t in self.terms],
                "not_attributed": round(self.not_attributed, 4), "notes": list(self.notes),
                "observations": self.observations,
                **({"busiest": msgspec.to_builtins(self.busiest)} if self.busiest is not None else {})}


@dataclass(frozen=True)
class OwnReading:
    """On a host that starved the target of cores: the verdict its account gives without the time it
    waited for a core, as it would read on dedicated cores (what to change in the service once it has
    them). ``lead``: the kind of the term that leads it."""

    quadrant: Quadrant
    layer: Layer | None
    remedy: str | None
    lead: str | None
    headline: str

    def to_json(self) -> dict[str, Any]:
        return {"quadrant": self.quadrant.value, "layer": self.layer.value if self.layer else None,
                "remedy": self.remedy, "lead": self.lead, "headline": self.headline}


@dataclass(frozen=True)
class Verdict:
    """``scores``: each judged quadrant's share of the limiting resource's time (the account named
    by ``account``; they add up to at most 1). ``mixed_with``: a second quadrant within the mixed
    margin (diagnose/verdict/account.py). ``confidence_reason``: why the confidence is what it is."""

    quadrant: Quadrant
    layer: Layer | None
    scores: dict[Quadrant, float]
    confidence: float
    headline: str
    mixed_with: Quadrant | None = None
    account: str | None = None
    confidence_reason: str = ""
    remedy: str | None = None  # the first thing to try: the lead term's kind's (diagnose/verdict/remedy.py)
    dedicated: OwnReading | None = None  # a starved host: the target's own reading on dedicated cores
    # what each remedy should gain in this capture, the first remedy's first (diagnose/verdict/gain.py)
    gains: tuple[PredictedGain, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "quadrant": self.quadrant.value,
            "layer": self.layer.value if self.layer else None,
            "scores": {q.value: round(s, 3) for q, s in self.scores.items()},
            "confidence": round(self.confidence, 3),
            "headline": self.headline,
            "mixed_with": self.mixed_with.value if self.mixed_with else None,
            "account": self.account,
            "confidence_reason": self.confidence_reason,
            "remedy": self.remedy,
            "dedicated": self.dedicated.to_json() if self.dedicated else None,
            "gains": [msgspec.to_builtins(g) for g in self.gains],
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
    data_quality: DataQuality = field(default_factory=DataQuality)  # how well it measured, per source
    details: Details = field(default_factory=Details)  # the tables renderers read, per source
    accounts: tuple[Account, ...] = ()  # where the time went, the limiting resource's first

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.to_json(),
            "account": [a.to_json() for a in self.accounts],
            "findings": [f.to_json() for f in self.findings],
            "signals": {k: s.to_json() for k, s in sorted(self.signals.items())},
            "not_judged": [n.to_json() for n in self.not_judged],
            "top_stacks": [s.to_json() for s in self.top_stacks],
            "threads": [t.to_json() for t in self.threads],
            "data_quality": msgspec.to_builtins(self.data_quality, enc_hook=scalar),
            "details": self.details.to_json(),
        }


@dataclass(frozen=True)
class Report:
    """One analysed bundle: what every command, view and renderer receives (diagnose/pipeline.py).

    ``bundle``: the opened Bundle (renderers that export streams, e.g. a trace format, read it);
    ``overrides``: the ``--thresholds`` the analysis ran with, so a re-render uses the same ones;
    ``verdict_after_s``: seconds from the capture's end (the manifest's ``ended_ns``) to this verdict,
    set by the attach that captured the bundle (diagnose/pipeline.py), None for a later analysis.
    """

    bundle: Bundle  # imported for type checking only: at run time the data model imports no I/O module
    analysis: Analysis
    overrides: dict[str, float] = field(default_factory=dict)
    verdict_after_s: float | None = None

    @property
    def manifest(self) -> dict[str, Any]:
        return self.bundle.manifest

    @property
    def verdict(self) -> Verdict:
        return self.analysis.verdict


@dataclass(frozen=True)
class Target:
    """The process being diagnosed, as the manifest records it (resolved from /proc by
    diagnose.capture.target.resolve_target; whether it still runs: diagnose.collectors.base.target_alive)."""

    pid: int
    name: str
    exe: str
    cmdline: tuple[str, ...]
    username: str
    uid: int
    create_time: float
    host: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": self.name,
            "exe": self.exe,
            "cmdline": list(self.cmdline),
            "user": self.username,
            "uid": self.uid,
            "create_time": self.create_time,
            "host": self.host,
        }

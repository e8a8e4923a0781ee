"""Rule shape: data plus a pure predicate over signals.

A rule fires when every condition holds. Its confidence grows from 0.6 (just past the thresholds)
to 1.0 (each condition past its threshold by ``scale``). A rule whose signals are missing is not
judged, and the reason of the missing signal is reported. A rule that fires while one of its
``unless`` conditions holds becomes context (no quadrant): what it saw is true, but another layer
demonstrably holds the system back.
"""
from __future__ import annotations

from dataclasses import dataclass

from diagnose.model import Layer, Quadrant, Severity, Signal


@dataclass(frozen=True)
class Condition:
    signal: str
    op: str  # ">=" or "<="
    threshold: float
    scale: float  # distance past the threshold that counts as certain

    def holds(self, value: float) -> bool:
        return value >= self.threshold if self.op == ">=" else value <= self.threshold

    def strength(self, value: float) -> float:
        past = value - self.threshold if self.op == ">=" else self.threshold - value
        return max(0.0, min(1.0, past / self.scale)) if self.scale > 0 else 1.0


@dataclass(frozen=True)
class Rule:
    """``summary`` is formatted with the condition values in order: ``{0:.0f}`` is the first."""

    id: str
    title: str
    quadrant: Quadrant | None  # None: secondary finding (data quality, context)
    layer: Layer
    severity: Severity
    conditions: tuple[Condition, ...]
    summary: str
    suggestions: tuple[str, ...]
    blocks_verdict: bool = False  # when it fires no quadrant is named (e.g. the target was stopped)
    # Evidence that another layer is the limit: when any of these holds (signal known), the finding
    # is kept as context, without a quadrant. Unknown signals never demote.
    unless: tuple[Condition, ...] = ()
    unless_reason: str = "another layer holds the system back"

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(c.signal for c in self.conditions)

    def overruled_by(self, signals: dict[str, Signal]) -> tuple[Condition, Signal] | None:
        """The first ``unless`` condition whose signal is known and holds, else None."""
        for c in self.unless:
            s = signals.get(c.signal)
            if s is not None and s.value is not None and c.holds(s.value):
                return c, s
        return None

    def missing(self, signals: dict[str, Signal]) -> list[Signal | str]:
        """Signals this rule needs that are absent or unknown."""
        out: list[Signal | str] = []
        for c in self.conditions:
            s = signals.get(c.signal)
            if s is None:
                out.append(c.signal)
            elif s.value is None:
                out.append(s)
        return out

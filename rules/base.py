"""Rule shape: data plus a pure predicate over signals.

A rule fires when every condition holds. Its confidence grows from 0.6 (just past the thresholds)
to 1.0 (each condition past its threshold by ``scale``). A rule whose signals are missing is not
judged, and the reason of the missing signal is reported. A rule that fires while one of its
``unless`` entries holds becomes context (no quadrant): what it saw is true, but another layer
demonstrably holds the system back. An entry is one condition, or a tuple of conditions that must
all hold (e.g. "GPU idle <= 10% and the kernel window covers >= 25% of the trace").
"""
from __future__ import annotations

from dataclasses import dataclass

from diagnose.model import Evidence, Layer, Quadrant, Severity, Signal


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


# An ``unless`` entry: one condition, or a group of conditions that must all hold.
Unless = Condition | tuple[Condition, ...]

# A training loop: backward or optimizer ops ran at all (>= 0.5% of the profiled host time; torch
# profiler trace). A serving process runs neither; a training step dominated by its DataLoader
# still spends only a few % in them (fixtures/torch/h200-train-step: 3.7%).
TRAINING = Condition("torch.training_ops_pct", ">=", 0.5, 0.0)


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
    # Evidence that another layer is the limit: when any entry holds (a condition, or a tuple of
    # conditions that all hold; signals known), the finding is kept as context, without a
    # quadrant. Unknown signals never demote.
    unless: tuple[Unless, ...] = ()
    unless_reason: str = "another layer holds the system back"
    # a reason of its own for the entry whose first condition reads that signal: (signal, reason)
    unless_reasons: tuple[tuple[str, str], ...] = ()
    # Remedies for a training loop (TRAINING holds), where ``suggestions`` speak of serving
    # (requests, tokenization, continuous batching); empty: ``suggestions`` fit both.
    training_suggestions: tuple[str, ...] = ()

    def remedies(self, signals: dict[str, Signal]) -> tuple[str, ...]:
        """``training_suggestions`` when the signals show a training loop, else ``suggestions``."""
        s = signals.get(TRAINING.signal)
        training = s is not None and s.value is not None and TRAINING.holds(s.value)
        return self.training_suggestions if training and self.training_suggestions else self.suggestions

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(c.signal for c in self.conditions)

    def reason_for(self, by: tuple[tuple[Condition, Evidence], ...]) -> str:
        """Why the ``unless`` entry that held (``overruled_by``'s pairs) demotes the finding."""
        first = by[0][0].signal if by else None
        return dict(self.unless_reasons).get(first or "", self.unless_reason)

    def overruled_by(self, signals: dict[str, Signal]) -> tuple[tuple[Condition, Evidence], ...] | None:
        """The (condition, evidence) pairs of the first ``unless`` entry that holds, else None."""
        for entry in self.unless:
            pairs = []
            for c in entry if isinstance(entry, tuple) else (entry,):
                s = signals.get(c.signal)
                if s is None or s.value is None or not c.holds(s.value):
                    break
                pairs.append((c, Evidence(s.name, s.value, s.unit, c.op, c.threshold, s.source)))
            else:
                return tuple(pairs)
        return None

    def values(self, signals: dict[str, Signal]) -> list[float] | None:
        """The values of this rule's conditions in order, or None when one is absent or unknown."""
        out: list[float] = []
        for c in self.conditions:
            s = signals.get(c.signal)
            if s is None or s.value is None:
                return None
            out.append(s.value)
        return out

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

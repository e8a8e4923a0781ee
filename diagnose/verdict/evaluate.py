"""rules -> findings -> verdict. Pure functions over signals."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from diagnose.model import JUDGED_QUADRANTS, Evidence, Finding, NotJudged, Quadrant, Severity, Signal, Verdict
from diagnose.rules import LAYER_PLAN, Rule
from diagnose.rules.base import Condition
from diagnose.signals.catalog import rule_signals, spec_for

BASE_CONFIDENCE = 0.6


class ThresholdError(ValueError):
    """A threshold override names no rule condition, or is not a finite number."""


def apply_overrides(rules: Iterable[Rule], overrides: dict[str, float]) -> tuple[Rule, ...]:
    """Replace thresholds: keys are ``<rule_id>:<signal>``. Raises ThresholdError."""
    rules = tuple(rules)
    known = {f"{r.id}:{c.signal}" for r in rules for c in r.conditions}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ThresholdError(f"unknown threshold {unknown[0]!r}; valid keys look like {sorted(known)[0]!r}")
    bad = sorted(k for k, v in overrides.items() if not math.isfinite(v))
    if bad:
        raise ThresholdError(f"threshold {bad[0]!r} is not a finite number")
    return tuple(
        replace(r, conditions=tuple(
            replace(c, threshold=float(overrides.get(f"{r.id}:{c.signal}", c.threshold)))
            for c in r.conditions))
        for r in rules
    )


def evaluate(rules: Iterable[Rule], signals: dict[str, Signal]) -> tuple[list[Finding], list[NotJudged]]:
    findings: list[Finding] = []
    not_judged: dict[str, NotJudged] = {}
    for rule in rules:
        undeclared = _undeclared(rule)
        not_judged.update((f"undeclared:{n.what}", n) for n in undeclared)
        if any(spec_for(c.signal) is None for c in rule.conditions):
            continue
        values = rule.values(signals)
        if values is None:
            first = rule.missing(signals)[0]
            reason = first.reason if isinstance(first, Signal) else f"signal {first} not produced"
            name = first.name if isinstance(first, Signal) else first
            not_judged.setdefault(reason or name, NotJudged(f"{rule.id} ({name})", reason or "unknown"))
            continue
        if all(c.holds(v) for c, v in zip(rule.conditions, values)):
            finding = _finding(rule, signals, values)
            overruled = rule.overruled_by(signals)
            findings.append(_as_context(finding, overruled, rule.reason_for(overruled)) if overruled else finding)
    findings = _blocked(findings)
    findings.sort(key=lambda f: (f.quadrant is None, -f.confidence))
    return findings, list(not_judged.values())


def _blocked(findings: list[Finding]) -> list[Finding]:
    """While a finding blocks the verdict (the target was stopped: its stacks are frozen), what the
    other rules saw is kept as context, without a quadrant or remedies: it describes no work."""
    veto = next((f for f in findings if f.blocks_verdict), None)
    if veto is None:
        return findings
    why = f" Not judged: {veto.title[:1].lower() + veto.title[1:]} ({veto.rule_id}), so this is not its limit."
    return [replace(f, quadrant=None, severity=Severity.INFO, summary=f.summary + why, suggestions=())
            if f.quadrant is not None else f for f in findings]


def _undeclared(rule: Rule) -> list[NotJudged]:
    """Rule signals the catalogue does not declare (misspelt names), never silently dropped: in a
    condition the rule is not evaluated; in an ``unless`` entry that entry can never hold."""
    out = []
    conditions = {c.signal for c in rule.conditions}
    for name in rule_signals(rule):
        if spec_for(name) is None:
            effect = ("the rule was not evaluated" if name in conditions
                      else "its `unless` entry naming it can never hold, so the rule is never overruled")
            out.append(NotJudged(f"{rule.id} ({name})", f"signal {name} is not declared in the signal "
                                 f"catalogue (diagnose/signals/catalog.py; a misspelt name?): {effect}"))
    return out


def _finding(rule: Rule, signals: dict[str, Signal], values: list[float]) -> Finding:
    strength = min(c.strength(v) for c, v in zip(rule.conditions, values))
    evidence = tuple(
        Evidence(c.signal, v, signals[c.signal].unit, c.op, c.threshold, signals[c.signal].source)
        for c, v in zip(rule.conditions, values)
    )
    return Finding(
        rule.id, rule.title, rule.summary.format(*values), rule.quadrant, rule.layer, rule.severity,
        BASE_CONFIDENCE + (1 - BASE_CONFIDENCE) * strength, evidence, rule.remedies(signals),
        rule.blocks_verdict,
    )


def _as_context(f: Finding, by: tuple[tuple[Condition, Evidence], ...], reason: str) -> Finding:
    """A finding another layer's evidence overrules: kept, without a quadrant or remedies, saying why."""
    seen = " and ".join(
        f"{e.signal} was {e.value:.0f}{'%' if e.unit == '%' else ' ' + e.unit} ({e.op} {e.threshold:g})" for _, e in by)
    return replace(f, quadrant=None, severity=Severity.INFO,
                   summary=f"{f.summary} Not the limit here: {seen}: {reason}.", suggestions=(),
                   evidence=f.evidence + tuple(e for _, e in by))


def decide(findings: list[Finding], quality_factor: float = 1.0) -> Verdict:
    """Score each quadrant by its strongest finding; the top one is the verdict.

    ``quality_factor`` (0..1) discounts confidence for poor data (e.g. many py-spy errors).
    """
    scores = {q: 0.0 for q in JUDGED_QUADRANTS}
    best: dict[Quadrant, Finding] = {}
    for f in findings:
        if f.quadrant is not None and f.confidence > scores[f.quadrant]:
            scores[f.quadrant] = f.confidence
            best[f.quadrant] = f
    veto = next((f for f in findings if f.blocks_verdict), None)
    if veto is not None:
        return Verdict(Quadrant.UNKNOWN, None, scores, 0.0, f"No verdict: {veto.summary}")
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    (top_q, top_s), (_, second_s) = ranked[0], ranked[1]
    if top_s <= 0:
        return Verdict(Quadrant.UNKNOWN, None, scores, 0.0,
                       "No bottleneck signature crossed its threshold (see what could not be judged).")
    lead = best[top_q]
    confidence = max(0.05, (top_s - 0.5 * second_s) * quality_factor)
    plan = " -> ".join(layer.value for layer in LAYER_PLAN[top_q])
    headline = (f"{top_q.value}-bound: act on the {lead.layer.value} layer first "
                f"(plan: {plan}). {lead.summary}")
    return Verdict(top_q, lead.layer, scores, confidence, headline)

"""analyze(Bundle) -> Analysis: signals -> rules -> findings -> verdict. Pure apart from reading the bundle."""
from __future__ import annotations

from diagnose.bundle import Bundle
from diagnose.model import Analysis, NotJudged
from diagnose.rules import RULES, Rule
from diagnose.signals import extract
from diagnose.verdict import apply_overrides, decide, evaluate

POOR_SAMPLING_ERROR_RATIO = 0.1


def analyze(bundle: Bundle, overrides: dict[str, float] | None = None,
            rules: tuple[Rule, ...] = RULES) -> Analysis:
    """Analyse a bundle (complete or partial). Raises KeyError for an unknown threshold override."""
    ex = extract(bundle)
    active_rules = apply_overrides(rules, overrides or {})
    findings, not_judged = evaluate(active_rules, ex.signals)
    ratio = ex.data_quality.get("pyspy_error_ratio") or 0.0
    quality = 0.8 if ratio > POOR_SAMPLING_ERROR_RATIO else 1.0
    not_judged.extend(_coverage_gaps(ex.signals))
    return Analysis(
        verdict=decide(findings, quality),
        findings=tuple(findings),
        signals=ex.signals,
        not_judged=tuple(not_judged),
        top_stacks=ex.top_stacks,
        threads=ex.threads,
        data_quality=ex.data_quality,
        details=ex.details,
    )


def _coverage_gaps(signals) -> list[NotJudged]:
    """Quadrant questions no collector in this bundle could answer."""
    gaps = []
    if not any(name.startswith("gpu.") for name in signals):
        gaps.append(NotJudged(
            "compute vs bandwidth on the GPU",
            "no GPU counters in this capture (SM activity, DRAM activity): GPU compute-bound and "
            "bandwidth-bound cannot be separated"))
    if not any(name.startswith("spans.") for name in signals):
        gaps.append(NotJudged(
            "request latency (P50/P99), QPS, stage breakdown",
            "no stage spans in this capture: start the service under `diagnose run` or send OTLP spans"))
    return gaps

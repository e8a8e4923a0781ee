"""analyze(Bundle) -> Analysis: signals -> rules -> findings -> verdict. Pure apart from reading the bundle."""
from __future__ import annotations

from dataclasses import replace

import msgspec

from diagnose.account import build_accounts
from diagnose.bundle import Bundle
from diagnose.model import Analysis, NotJudged, Signal
from diagnose.results.quality import AnalysisQuality, DataQuality, InFlightCheck
from diagnose.rules import RULES, Rule
from diagnose.signals import extract
from diagnose.signals.catalog import spec_for
from diagnose.verdict.account import decide
from diagnose.verdict.data_quality import warnings
from diagnose.verdict.evaluate import apply_overrides, evaluate
from diagnose.verdict.gain import predict_gains
from diagnose.verdict.llm_phases import with_llm_phases
from diagnose.verdict.overrides import split_overrides
from diagnose.verdict.sampling import discount_stack_findings, sampling_factor

POOR_SAMPLING_ERROR_RATIO = 0.1
MIN_CONFIDENT_SAMPLES = 200  # fewer py-spy samples than this (2 s at 100 Hz) lower the confidence
GAP_FAMILIES = ("gpu.", "spans.", "kernels.", "llm.", "torch.", "serving.")


def analyze(bundle: Bundle, overrides: dict[str, float] | None = None,
            rules: tuple[Rule, ...] = RULES) -> Analysis:
    """Analyse a bundle (complete or partial). ``overrides``: rule thresholds and analysis
    parameters (diagnose/overrides.py). Raises ThresholdError for a bad override, before reading."""
    params, rule_overrides = split_overrides(overrides or {}, rules)
    active_rules = apply_overrides(rules, rule_overrides)
    ex = extract(bundle, params=params)
    findings, not_judged = evaluate(active_rules, ex.signals)
    findings = discount_stack_findings(findings, ex.data_quality)
    findings.sort(key=lambda f: (f.quadrant is None, -f.confidence))  # as evaluate orders them
    quality = _quality_factor(ex.data_quality)
    not_judged = [n for n in not_judged if not _explained_by_coverage(n)]
    # what the signals were measured with, when not the defaults
    own = AnalysisQuality(threshold_overrides=dict(rule_overrides), params=params.changed(),
                          in_flight_check=in_flight_check(ex.signals))
    ex.data_quality = msgspec.structs.replace(ex.data_quality, analysis=own)
    gaps = _coverage_gaps(ex.signals)
    not_judged.extend(gaps)
    accounts = build_accounts(bundle, ex)
    ex.data_quality = msgspec.structs.replace(ex.data_quality, warnings=warnings(ex.data_quality))
    missing = [SOURCE_OF_GAP[g.what] for g in gaps if g.what in SOURCE_OF_GAP]
    verdict = with_llm_phases(decide(accounts, findings, quality, ex.data_quality, missing, ex.signals),
                              ex.details.llm)
    return Analysis(
        verdict=replace(verdict, gains=predict_gains(verdict, accounts, ex.signals, ex.threads)),
        accounts=accounts,
        findings=tuple(findings),
        signals=ex.signals,
        not_judged=tuple(not_judged),
        top_stacks=ex.top_stacks,
        threads=ex.threads,
        data_quality=ex.data_quality,
        details=ex.details,
    )


# What each coverage gap means for the confidence line (the source that was missing).
SOURCE_OF_GAP = {
    "compute vs bandwidth on the GPU": "GPU counters",
    "GPU idle time, kernel mix and what the GPU waits for (kernel timeline)": "kernel timeline",
    "request latency (P50/P99), QPS, stage breakdown": "stage spans",
}


def in_flight_check(signals: dict[str, Signal]) -> InFlightCheck | None:
    """In-flight requests two ways: accepted TCP connections (from outside) against the spans'
    Little's law (QPS x mean latency). The connections bound in-flight from above (idle keep-alive
    connections count), so a ratio well above 1 means idle connections, well below 1 requests the
    connection count misses (another listener, a proxy in front)."""
    tcp, little = signals.get("tcp.in_flight_mean"), signals.get("spans.in_flight_littles_law")
    if tcp is None or little is None or tcp.value is None or not little.value:
        return None
    ratio = tcp.value / little.value
    note = ("agree" if 0.7 <= ratio <= 1.5 else
            "more connections than requests in flight: idle keep-alive connections" if ratio > 1.5 else
            "fewer connections than requests in flight: requests arrive another way (proxy, another socket)")
    return InFlightCheck(tcp_connections_mean=round(tcp.value, 2), spans_littles_law=round(little.value, 2),
                         ratio=round(ratio, 2), reading=note)


def _explained_by_coverage(n: NotJudged) -> bool:
    """A rule not judged for a signal of a family that one missing source explains at once
    (``_coverage_gaps`` says it once, not per rule). An undeclared signal is never explained so."""
    signal = n.what.rsplit("(", 1)[-1].removesuffix(")")
    return signal.startswith(GAP_FAMILIES) and spec_for(signal) is not None


def _quality_factor(dq: DataQuality) -> float:
    """Confidence discount for thin or noisy stack data (0..1)."""
    pyspy = dq.pyspy
    factor = 0.8 if pyspy is not None and (pyspy.error_ratio or 0.0) > POOR_SAMPLING_ERROR_RATIO else 1.0
    samples = pyspy.samples if pyspy is not None else None
    if samples is not None and samples < MIN_CONFIDENT_SAMPLES:
        factor *= max(0.3, samples / MIN_CONFIDENT_SAMPLES)
    return factor * sampling_factor(dq)


def _coverage_gaps(signals: dict[str, Signal]) -> list[NotJudged]:
    """Quadrant questions no collector in this bundle could answer."""
    gaps = []
    sm, dram = signals.get("gpu.sm_active_pct"), signals.get("gpu.dram_active_pct")
    if not (sm is not None and sm.known and dram is not None and dram.known):
        # the GPU signal source names the real cause (no driver, MIG, exporter field off...)
        why = next((s.reason for s in (sm, dram) if s is not None and not s.known and s.reason),
                   "no GPU counters in this capture")
        gaps.append(NotJudged(
            "compute vs bandwidth on the GPU",
            f"{why}. Without SM and DRAM activity, GPU compute-bound and bandwidth-bound cannot be "
            "separated (NVML's GPU-Util only says a kernel was running)"))
    idle = signals.get("gpu.idle_pct")
    if idle is None or not idle.known:
        gaps.append(NotJudged(
            "GPU idle time, kernel mix and what the GPU waits for (kernel timeline)",
            (idle.reason if idle is not None and idle.reason else "no torch profiler trace in this capture")))
    if not any(name.startswith("spans.") and s.known for name, s in signals.items()):
        why = next((s.reason for n, s in sorted(signals.items()) if n.startswith("spans.") and s.reason),
                   "no stage spans in this capture: start the service under `diagnose run` or send OTLP spans")
        gaps.append(NotJudged("request latency (P50/P99), QPS, stage breakdown", why))
    return gaps

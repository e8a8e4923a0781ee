"""Stack-based findings under an undersampled py-spy lose confidence and say why (pure).

Below UNDERSAMPLED_SHARE of the asked rate per thread (diagnose/signals/pyspy_rate.py), each
thread's share of time by category rests on a few samples per second, taken in rounds that lag
the threads they read: a finding whose evidence comes from py-spy's stacks keeps its quadrant but
its confidence is scaled by achieved share / UNDERSAMPLED_SHARE (at least MIN_FACTOR), and its
summary names the achieved and asked rates and the reason.
"""
from __future__ import annotations

from dataclasses import replace

from diagnose.model import Finding
from diagnose.results.quality import DataQuality
from diagnose.signals.pyspy_rate import UNDERSAMPLED_SHARE

STACK_SOURCE = "py-spy"  # the source of every signal read from py-spy's stacks starts so
MIN_FACTOR = 0.3


def sampling_factor(dq: DataQuality) -> float:
    """Confidence factor (MIN_FACTOR..1) from the achieved share of py-spy's asked rate."""
    share = dq.pyspy.achieved_share_pct if dq.pyspy is not None else None
    if share is None or share >= 100 * UNDERSAMPLED_SHARE:
        return 1.0
    return max(MIN_FACTOR, share / (100 * UNDERSAMPLED_SHARE))


def stack_based(f: Finding) -> bool:
    return any(e.source.startswith(STACK_SOURCE) for e in f.evidence)


def discount_stack_findings(findings: list[Finding], dq: DataQuality) -> list[Finding]:
    factor = sampling_factor(dq)
    pyspy = dq.pyspy
    if factor >= 1.0 or pyspy is None or not pyspy.undersampled:
        return findings
    why = (f" Lower confidence (x{factor:.2f}): py-spy sampled each thread at {pyspy.achieved_hz_per_thread} "
           f"Hz of the {pyspy.requested_hz or 0:g} Hz requested (see data quality).")
    return [replace(f, confidence=f.confidence * factor, summary=f.summary + why) if stack_based(f) else f
            for f in findings]


__all__ = ["discount_stack_findings", "sampling_factor", "stack_based"]

"""Data-quality warnings: what the capture did not measure as asked, stated once (pure).

Each source puts its own statement in its data-quality section (spans dropped: signals/spans/
coverage.py; spans sampled by the agent: signals/spans/sampling.py; py-spy's achieved rate and
overrun windows: signals/pyspy_rate.py; process-collector gaps: signals/process_gaps.py).
``warnings`` gathers them, each with the collectors it concerns, for the report's first screen,
the terminal summary and findings.json (``data_quality.warnings``).
"""
from __future__ import annotations

from diagnose.results.quality import DataQuality, QualityWarning


def warnings(dq: DataQuality) -> tuple[QualityWarning, ...]:
    """Each section's statements with the collectors they concern, in a fixed order: spans dropped,
    spans sampled, py-spy undersampled and overran, process gaps, a late torch trace, spans
    outside the capture window, spans that repeat another's id."""
    spans, pyspy, process, torch = dq.spans, dq.pyspy, dq.process, dq.torch
    out = []
    if spans is not None and spans.coverage is not None:
        out.append(QualityWarning(spans.coverage.producers, spans.coverage.statement))
    statements = (
        (spans.sampled if spans else None, ("agent",)),
        (pyspy.undersampled if pyspy else None, ("pyspy",)), (pyspy.overran if pyspy else None, ("pyspy",)),
        (process.gaps_statement if process else None, ("process",)),
        (torch.trace_late if torch else None, ("agent",)),
        (spans.outside_window if spans else None, ("agent", "otlp")),
        (spans.repeated_ids if spans else None, ("agent", "otlp")))
    out += [QualityWarning(collectors, text) for text, collectors in statements if text]
    return tuple(out)


__all__ = ["warnings"]

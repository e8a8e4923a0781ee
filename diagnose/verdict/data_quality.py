"""Data-quality warnings: what the capture did not measure as asked, stated once (pure).

Each source puts its own statement in the data-quality dict (spans dropped: signals/spans/
coverage.py; spans sampled by the agent: signals/spans/sampling.py; py-spy's achieved rate and
overrun windows: signals/pyspy_rate.py; process-collector gaps: signals/process_gaps.py).
``warnings`` gathers them, each with the collectors it concerns, for the report's first screen,
the terminal summary and findings.json (``data_quality.warnings``).
"""
from __future__ import annotations

from typing import Any

# (data-quality key holding a statement, the collectors it concerns)
STATEMENTS = (("spans_sampled", ("agent",)), ("pyspy_undersampled", ("pyspy",)), ("pyspy_overran", ("pyspy",)),
              ("process_gaps_statement", ("process",)), ("torch_trace_late", ("agent",)),
              ("spans_outside_window", ("agent", "otlp")))


def warnings(dq: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{"collectors": [...], "text": "..."}]`` in a fixed order: spans, py-spy, process, agent."""
    out: list[dict[str, Any]] = []
    cov = dq.get("spans_coverage")
    if isinstance(cov, dict) and isinstance(cov.get("statement"), str):
        out.append({"collectors": list(cov.get("producers") or []), "text": cov["statement"]})
    for key, collectors in STATEMENTS:
        if isinstance(dq.get(key), str):
            out.append({"collectors": list(collectors), "text": dq[key]})
    return out


__all__ = ["warnings"]

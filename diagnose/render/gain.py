"""A predicted gain (diagnose/results/gain.py) in words, as the report and the text summary print it
beside the remedy. Pure."""
from __future__ import annotations

from diagnose.results.gain import Band, PredictedGain


def _band(b: Band) -> str:
    return f"{b.low:.2f}x" if abs(b.high - b.low) < 0.005 else f"{b.low:.2f}x-{b.high:.2f}x"


def gain_words(g: PredictedGain) -> str | None:
    """"throughput 1.24x-1.40x, P50 0.79x-0.97x (amdahl: ...)", or None when no gain is predicted."""
    parts = [f"throughput {_band(g.throughput_x)}"] if g.throughput_x else []
    if g.p50_x is not None:
        parts.append(f"P50 {_band(g.p50_x)}")
    if g.p99_x is not None and g.p99_x != g.p50_x:
        parts.append(f"P99 {_band(g.p99_x)}")
    if not parts:
        return None
    return f"{', '.join(parts)} ({g.method}: {g.assumption})"


__all__ = ["gain_words"]

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


def _short(remedy: str) -> str:
    """The remedy's first clause, at most 60 characters, cut between words."""
    head = remedy.split(":")[0].split(";")[0].split(",")[0]
    return head if len(head) <= 60 else head[:59].rsplit(" ", 1)[0] + "…"


def _best(g: PredictedGain) -> float:
    return g.throughput_x.high if g.throughput_x is not None else 0.0


def other_gains(gains: tuple[PredictedGain, ...], first: str | None) -> str | None:
    """The other remedies' predicted throughput bands, in one line; leads with a warning when one of
    them is predicted to gain clearly more than the first remedy (a symptom can lead the account)."""
    others = [g for g in gains if g.remedy != first and g.throughput_x is not None]
    if not others:
        return None
    line = "; ".join(f"{_short(g.remedy)}: throughput {_band(g.throughput_x)}"  # type: ignore[arg-type]
                     for g in sorted(others, key=lambda g: -_best(g)))
    lead = next((g for g in gains if g.remedy == first), None)
    top = max(others, key=_best)
    if lead is not None and _best(top) > 1.05 * max(1.0, _best(lead)):
        return (f"the largest predicted throughput gain is another remedy's ({_short(top.remedy)}): {line}")
    return line


__all__ = ["gain_words", "other_gains"]

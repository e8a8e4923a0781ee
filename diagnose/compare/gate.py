"""The regression gate: ``--fail-on p99=+10%,qps=-5%``.

Each condition is ``KEY=SIGN NUMBER [%]``: KEY one of metrics.METRICS; ``+`` fails when the metric
rises by more than the amount, ``-`` when it falls by more; without a sign, the direction in which
the catalogue says the metric gets worse. The amount is a percentage of the base value with ``%``,
else an absolute amount in the metric's unit (``p99=+20`` = 20 ms). A condition fails only when
the change is also significant (beyond the captures' own noise); a metric whose noise could not be
estimated is judged by the amount alone, and the result says so. A metric missing from either
capture makes the gate *unjudged* (``GateResult.unjudged``; the CLI exits 2, not 1): a regression
gate must neither pass nor report a regression on what it could not see.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from diagnose.compare.diff import Comparison
from diagnose.compare.metrics import BY_KEY
from diagnose.signals.catalog import Worse

_ITEM = re.compile(r"^\s*([a-z0-9_]+)\s*=\s*([+-]?)\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*$")


class GateError(ValueError):
    """A --fail-on condition that cannot be read; the message names it and the accepted form."""


@dataclass(frozen=True)
class Condition:
    key: str
    rise: bool  # True: fails on a rise, False: on a fall
    amount: float
    percent: bool

    def __str__(self) -> str:
        return f"{self.key}={'+' if self.rise else '-'}{self.amount:g}{'%' if self.percent else ''}"


@dataclass(frozen=True)
class GateResult:
    condition: Condition
    failed: bool
    reason: str
    unjudged: bool = False  # the metric was not measured in both captures, or too few requests to judge


def parse_fail_on(text: str) -> tuple[Condition, ...]:
    """``p99=+10%,qps=-5%`` -> conditions. Raises GateError."""
    out = []
    for item in (t for t in text.split(",") if t.strip()):
        m = _ITEM.match(item)
        if not m:
            raise GateError(f"cannot read --fail-on condition {item.strip()!r}: write KEY=+N% or KEY=-N "
                            f"(KEY one of {', '.join(BY_KEY)})")
        key, sign, amount, pct = m.groups()
        if key not in BY_KEY:
            raise GateError(f"unknown metric {key!r} in --fail-on; choose one of {', '.join(BY_KEY)}")
        worse = BY_KEY[key].worse
        if not sign and worse is Worse.NEITHER:
            raise GateError(f"--fail-on {key}: say the direction that fails (+ or -): {key} is neither better "
                            "nor worse when higher")
        rise = sign == "+" if sign else worse is Worse.HIGHER
        value = float(amount)
        if not math.isfinite(value):
            raise GateError(f"--fail-on {item.strip()!r}: the amount is not a finite number")
        out.append(Condition(key, rise, value, bool(pct)))
    if not out:
        raise GateError("--fail-on is empty: write e.g. p99=+10%,qps=-5%")
    return tuple(out)


def _judge(c: Condition, comp: Comparison) -> GateResult:
    m = comp.metric(c.key)
    if m is None or m.delta is None:
        where = ("either capture" if m is None or (m.base is None and m.new is None)
                 else f"BASE ({comp.base.bundle})" if m.base is None else f"NEW ({comp.new.bundle})")
        hint = " (latency and QPS need stage spans)" if BY_KEY[c.key].signal.startswith("spans.") else ""
        return GateResult(c, False, f"{c.key} was not measured in {where}{hint}", unjudged=True)
    change = m.delta_pct if c.percent else m.delta
    if change is None:
        return GateResult(c, False, f"{c.key}: the base value is 0, a percentage change is undefined", unjudged=True)
    beyond = change > c.amount if c.rise else change < -c.amount
    unit = "%" if c.percent else f" {m.unit}"
    said = f"{c.key} {change:+.1f}{unit} (limit {'+' if c.rise else '-'}{c.amount:g}{unit})"
    if m.too_few:  # neither a pass nor a regression, whichever side of the limit the estimate fell
        return GateResult(c, False, f"{said}: {m.method}; capture longer", unjudged=True)
    if not beyond:
        return GateResult(c, False, f"{said}: within the limit")
    if m.significant is False:
        return GateResult(c, False, f"{said}: beyond the limit but within the captures' noise "
                                    f"(band ±{m.band:.3g} {m.unit})")
    if m.significant is None:
        return GateResult(c, True, f"{said}: beyond the limit (noise not estimated: {m.method})")
    return GateResult(c, True, f"{said}: beyond the limit and beyond the noise (band ±{m.band:.3g} {m.unit})")


def evaluate(conditions: tuple[Condition, ...], comp: Comparison) -> tuple[GateResult, ...]:
    return tuple(_judge(c, comp) for c in conditions)


__all__ = ["Condition", "GateError", "GateResult", "evaluate", "parse_fail_on"]

"""Analysis parameters: the thresholds signal sources measure with, as opposed to rule thresholds.

A rule threshold decides whether a finding fires on a signal; an analysis parameter changes the
signal itself (what counts as a GPU idle gap, a short kernel, kernel wait). Both come from the same
``diagnose analyze --thresholds FILE`` JSON; analysis parameters have ``<source>:<name>_<unit>``
keys (``PARAM_KEYS``), e.g. ``{"timeline:gpu_gap_min_us": 200}``. Values are in the unit the key
names and are stored in ns, the unit the analyzers use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from diagnose.traces.report import TimelineOptions

NS_PER_US = 1_000


class ParamError(ValueError):
    """A parameter override is unknown, not finite, not positive, or below 1 ns; one line."""


@dataclass(frozen=True)
class ParamKey:
    """One overridable parameter: its key, where it lives, its unit and what it means."""

    key: str  # user-facing, with the unit in the name
    group: str  # AnalysisParams field holding the options object
    field: str  # field of that options object (ns)
    ns_per_unit: int
    meaning: str


PARAM_KEYS: tuple[ParamKey, ...] = (
    ParamKey("timeline:gpu_gap_min_us", "timeline", "gap_min_ns", NS_PER_US,
             "shortest hole in the union of GPU events counted as an idle gap (default 100)"),
    ParamKey("timeline:torch_op_gap_min_us", "timeline", "host_gap_min_ns", NS_PER_US,
             "CPU-only traces: shortest hole in the union of torch ops counted as a gap (default 1000)"),
    ParamKey("timeline:kernel_wait_max_us", "timeline", "kernel_wait_ns", NS_PER_US,
             "per-stream idle before a kernel below this is kernel wait, not other (default 30, as HTA)"),
    ParamKey("timeline:short_kernel_max_us", "timeline", "short_kernel_ns", NS_PER_US,
             "kernels shorter than this count as short, launch-overhead sized (default 10)"),
)
_BY_KEY = {p.key: p for p in PARAM_KEYS}


@dataclass(frozen=True)
class AnalysisParams:
    """Every analysis parameter, per signal source; the defaults are the documented ones."""

    timeline: TimelineOptions = TimelineOptions()

    def value(self, key: str) -> float:
        """The parameter ``key`` in the unit its name says."""
        p = _BY_KEY[key]
        return float(getattr(getattr(self, p.group), p.field) / p.ns_per_unit)

    def changed(self) -> dict[str, float]:
        """``{key: value}`` of the parameters that differ from the defaults (for the report)."""
        return {p.key: self.value(p.key) for p in PARAM_KEYS if self.value(p.key) != DEFAULT_PARAMS.value(p.key)}


DEFAULT_PARAMS = AnalysisParams()


def is_param_key(key: str) -> bool:
    return key in _BY_KEY


MAX_PARAM_NS = 86_400 * 10**9  # a gap or kernel threshold past a day is a typo


def with_overrides(values: dict[str, float], base: AnalysisParams = DEFAULT_PARAMS) -> AnalysisParams:
    """``base`` with the given ``{key: value}`` applied. Raises ParamError naming the first bad key."""
    out = base
    for key in sorted(values):
        p = _BY_KEY.get(key)
        if p is None:
            raise ParamError(f"unknown analysis parameter {key!r}; known: {', '.join(_BY_KEY)}")
        value = values[key]
        if not math.isfinite(value) or value <= 0:
            raise ParamError(f"analysis parameter {key!r} must be a positive finite number, got {value!r}")
        if not math.isfinite(value * p.ns_per_unit) or value * p.ns_per_unit > MAX_PARAM_NS:
            raise ParamError(f"analysis parameter {key!r} = {value!r} is longer than a day")
        ns = round(value * p.ns_per_unit)
        if ns < 1:
            raise ParamError(f"analysis parameter {key!r} = {value!r} is below 1 ns")
        out = replace(out, **{p.group: replace(getattr(out, p.group), **{p.field: ns})})
    return out


__all__ = ["AnalysisParams", "DEFAULT_PARAMS", "PARAM_KEYS", "ParamError", "ParamKey", "is_param_key",
           "with_overrides"]

"""The serving engine's section of Details (diagnose/signals/serving.py ``serving_details``): its
/metrics scrapes over the capture window, gauges, counters and histograms in canonical units
(diagnose/catalogs/serving_fields.py TABLE)."""
from __future__ import annotations

import msgspec


class GaugeDetail(msgspec.Struct, frozen=True):
    """A gauge over the scrapes, in the canonical unit (catalogs/serving_fields.py TABLE)."""

    mean: float
    max: float
    metric: str  # the engine's metric name(s) read


class RateDetail(msgspec.Struct, frozen=True):
    """A counter over the window: ``increase`` (canonical unit), ``per_s`` = increase / window,
    ``resets`` (the engine restarted)."""

    increase: float
    per_s: float
    resets: int
    metric: str


class HistogramDetail(msgspec.Struct, frozen=True):
    """A histogram's observations in the window: their mean and bucket-interpolated P50 / P99
    (seconds), the bucket bounds read, and whether a quantile fell in the +Inf bucket."""

    count: float
    mean_s: float | None
    p50_s: float | None
    p99_s: float | None
    metric: str
    buckets: int
    above_top_bucket: bool = False


class ServingDetails(msgspec.Struct, frozen=True, kw_only=True):
    """The engine's window (findings.json ``details.serving``: the report, the engine account and the
    terminal read it): ``gauges``, ``rates`` and ``histograms`` keyed by the canonical signals of TABLE."""

    engine: str | None = None
    url: str = ""
    scrapes: int = 0
    window_s: float = 0.0
    gauges: dict[str, GaugeDetail] = {}
    rates: dict[str, RateDetail] = {}
    histograms: dict[str, HistogramDetail] = {}
    queue_share_pct: float | None = None  # queue time, % of end-to-end latency (``queue_share``)
    errors: list[str] = []  # the first few failed scrapes' reasons
    scrape_errors: int = 0
    garbage_lines: int = 0  # malformed lines of engine metrics skipped
    garbage_examples: list[str] = []
    dropped: int = 0  # series, buckets or values left out by the collector's caps
    definitions: str = ""  # DEFINITIONS


__all__ = ["GaugeDetail", "HistogramDetail", "RateDetail", "ServingDetails"]

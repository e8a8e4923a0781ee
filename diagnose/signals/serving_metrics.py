"""A serving engine's /metrics scrapes -> window statistics (ServingMetrics). Pure.

Over the capture window (first to last scrape):

- gauges: mean and max over the scrapes (1 s apart), series combined per scrape as the table says;
- counters: increase over the window, as Prometheus ``increase()`` counts it (a value below the
  previous one is a reset: the counter restarted from 0, so its new value is the increase), and the
  rate = increase / window seconds;
- histograms: the increase of each cumulative bucket (and of ``_sum``/``_count``) from the first to
  the last scrape, across resets as for counters, then P50/P99 by linear interpolation inside the
  bucket holding the rank (as PromQL ``histogram_quantile``: the first bucket starts at 0, a rank
  in the +Inf bucket is reported as the highest finite bound). These quantiles are
  bucket-interpolated: exact only to the bucket's width. The mean is exact: increase of ``_sum`` /
  increase of ``_count``.

Series of one metric with different labels combine: gauges by the table's rule per scrape;
counters and histograms per series first: each labelset's own increase over the scrapes that hold
it (its own resets), then summed (histograms bucket by bucket over the bounds every series has).
A series first seen mid-window counts from its first scrape, as Prometheus ``increase()`` does
(its earlier history is not this window's); one that vanishes keeps what it gained while seen and
is no restart of the others.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnose.bundle.records.serving import (
    ServingErrorRecord,
    ServingRecord,
    ServingScrapeRecord,
    ServingSeries,
    ServingSourceRecord,
    serving_records,
)
from diagnose.catalogs.serving_fields import METRICS, TABLE, Combine, Engine, Kind, ServingMetric
from diagnose.results.serving import HistogramDetail

QUANTILES = (0.5, 0.99)
# The probe's scrape comes a little before the source record; anything much earlier is not this capture's.
EARLIEST_BEFORE_SOURCE_NS = 60 * 10**9


@dataclass(frozen=True)
class GaugeStat:
    """Mean and max over the scrapes, in the metric's unit."""

    mean: float
    max: float
    scrapes: int
    metric: str


@dataclass(frozen=True)
class RateStat:
    """``increase`` over the window (the metric's unit) and ``per_s`` = increase / window seconds;
    ``resets``: times the counter went down (engine restarted)."""

    increase: float
    per_s: float
    resets: int
    metric: str


# a histogram's window statistics: the findings' type itself (diagnose/results/serving.py)
QuantileStat = HistogramDetail


@dataclass(frozen=True)
class ServingMetrics:
    """Window statistics of one engine's /metrics, keyed by the canonical signals of TABLE."""

    engine: Engine | None
    url: str
    scrapes: int
    window_s: float
    gauges: Mapping[str, GaugeStat] = field(default_factory=dict)
    rates: Mapping[str, RateStat] = field(default_factory=dict)
    histograms: Mapping[str, QuantileStat] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    garbage_lines: int = 0
    garbage_examples: tuple[str, ...] = ()
    dropped: int = 0


@dataclass(frozen=True)
class Scrape:
    """One scrape of the window: its record, and its series of metrics in TABLE."""

    record: ServingScrapeRecord
    series: tuple[ServingSeries, ...]

    @property
    def t_ns(self) -> int:
        return self.record.t_ns


@dataclass(frozen=True)
class Scrapes:
    """What the stream holds: the (last) source record, the scrapes in time order, the failed
    scrapes' reasons."""

    source: ServingSourceRecord | None
    scrapes: list[Scrape]
    errors: list[str]


@dataclass(frozen=True)
class HistogramPoint:
    """One histogram series at one scrape: cumulative ``buckets`` {upper bound: count} (+Inf as
    float inf), ``sum`` and ``count`` (the +Inf bucket's where the series has none)."""

    buckets: dict[float, float]
    sum: float
    count: float


def counter_increase(values: Iterable[float]) -> tuple[float, int]:
    """(increase, resets) of a cumulative counter read in order; a drop is a reset from 0."""
    total, resets, prev = 0.0, 0, None
    for v in values:
        if prev is not None:
            if v >= prev:
                total += v - prev
            else:
                total += v
                resets += 1
        prev = v
    return total, resets


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float | None, bool]:
    """(quantile, rank in the +Inf bucket) by linear interpolation inside the bucket holding rank
    q x total; ``buckets``: (upper bound, cumulative count), ascending, ending with +Inf."""
    if not buckets or buckets[-1][1] <= 0:
        return None, False
    rank = q * buckets[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank and cum > lo_count:
            if le == float("inf"):
                finite = [b for b, _ in buckets if b != float("inf")]
                return (finite[-1] if finite else None), True
            if lo_bound > le:  # a negative first bound: no interpolation below it
                return le, False
            return lo_bound + (le - lo_bound) * (rank - lo_count) / (cum - lo_count), False
        lo_bound, lo_count = le, cum
    return None, False


def read_scrapes(records: Iterable[ServingRecord | Mapping[str, Any]]) -> Scrapes:
    """The stream's records (typed, or plain dicts decoded here: the live view's tail) read into
    the window's scrapes; a scrape far before the source record is not this capture's."""
    source: ServingSourceRecord | None = None
    scrapes: list[Scrape] = []
    errors: list[str] = []
    for rec in serving_records(records):
        if isinstance(rec, ServingSourceRecord):
            source = rec
        elif isinstance(rec, ServingErrorRecord):
            errors.append(rec.why)
        else:
            scrapes.append(Scrape(rec, tuple(s for s in rec.series if s.name in METRICS)))
    if source is not None and source.t_ns is not None:  # a hand-edited scrape far before the collector started
        scrapes = [sc for sc in scrapes if sc.t_ns >= source.t_ns - EARLIEST_BEFORE_SOURCE_NS]
    return Scrapes(source, sorted(scrapes, key=lambda sc: sc.t_ns), errors)


def _series(scrape: Scrape, names: tuple[str, ...]) -> tuple[str | None, list[ServingSeries]]:
    """The series of the first of ``names`` (newest first) present in the scrape."""
    for name in names:
        found = [s for s in scrape.series if s.name == name.removesuffix("_total")]
        if found:
            return name, found
    return None, []


def _gauge_points(m: ServingMetric, scrapes: list[Scrape]) -> tuple[str | None, dict[int, float]]:
    """(metric name used, {scrape index: combined value in the canonical unit})."""
    points: dict[int, float] = {}
    used = None
    for i, sc in enumerate(scrapes):
        name, found = _series(sc, m.names)
        vals = [v for s in found if (v := s.finite_value) is not None]
        if not vals:
            continue
        used = used or name
        combined = max(vals) if m.combine is Combine.MAX else sum(vals) / (
            len(vals) if m.combine is Combine.MEAN else 1)
        points[i] = combined * m.factor
    return used, points


def _stat(used: str | None, points: dict[int, float]) -> GaugeStat | None:
    if not points or used is None:
        return None
    vals = list(points.values())
    return GaugeStat(sum(vals) / len(vals), max(vals), len(vals), used)


def _in_flight(gauge_points: dict[str, tuple[str | None, dict[int, float]]]) -> GaugeStat | None:
    """running + waiting per scrape (either alone where the engine exposes one: Triton)."""
    parts = [gauge_points[k] for k in ("running", "waiting") if k in gauge_points and gauge_points[k][1]]
    if not parts:
        return None
    common = set.intersection(*(set(p[1]) for p in parts))
    return _stat(" + ".join(str(p[0]) for p in parts), {i: sum(p[1][i] for p in parts) for i in common})


LabelKey = tuple[tuple[str, str], ...]  # a series' labels, sorted: which series of a metric it is


def _label_key(s: ServingSeries) -> LabelKey:
    return tuple(sorted(s.labels.items()))


def _counter(m: ServingMetric, scrapes: list[Scrape], window_s: float) -> RateStat | None:
    by_series: dict[LabelKey, list[float]] = {}
    used = None
    for sc in scrapes:
        name, found = _series(sc, m.names)
        for s in found:
            if (v := s.finite_value) is not None:
                used = used or name
                by_series.setdefault(_label_key(s), []).append(v)
    if used is None or window_s <= 0:
        return None
    parts = [counter_increase(vals) for vals in by_series.values()]
    n = len(parts) if m.combine is Combine.MEAN else 1
    inc = sum(p[0] for p in parts) / n * m.factor
    return RateStat(inc, inc / window_s, sum(p[1] for p in parts), used)


def _hist_point(s: ServingSeries) -> HistogramPoint | None:
    """One series' histogram at one scrape; None for a series without usable buckets."""
    pts = s.finite_buckets
    if not pts:
        return None
    count = s.finite_count
    return HistogramPoint(pts, s.finite_sum or 0.0, count if count is not None else max(pts.values()))


def _histogram_resets(points: list[HistogramPoint], bounds: list[float]) -> set[int]:
    """Scrapes at which the histogram restarted: its count or any bucket went down. A restart
    resets every bucket at once, so it is decided for the histogram, not bucket by bucket."""
    return {i for i in range(1, len(points)) if points[i].count < points[i - 1].count
            or any(points[i].buckets[le] < points[i - 1].buckets[le] for le in bounds)}


def _increase(values: list[float], resets: set[int]) -> float:
    """Increase over the scrapes, restarting from 0 at each reset."""
    return sum(values[i] if i in resets else values[i] - values[i - 1]
               for i in range(1, len(values)))


def _series_window(points: list[HistogramPoint]) -> HistogramPoint | None:
    """One series' increase over the scrapes that hold it, with its own resets: bucket
    increases over the bounds all its scrapes have, sum and count increases; None below two
    scrapes (as Prometheus ``increase()``: a series first seen mid-window counts from there)."""
    if len(points) < 2:
        return None
    bounds = sorted(set.intersection(*(set(p.buckets) for p in points)))
    resets = _histogram_resets(points, bounds)
    return HistogramPoint({le: _increase([p.buckets[le] for p in points], resets) for le in bounds},
                          _increase([p.sum for p in points], resets), _increase([p.count for p in points], resets))


def _histogram(m: ServingMetric, scrapes: list[Scrape]) -> QuantileStat | None:
    """Each series' (labelset's) window increase on its own, then summed bucket by bucket over the
    bounds every such series has: a series that appears or vanishes mid-window adds only what it
    gained while seen, never its history, and is no restart of the others."""
    by_series: dict[LabelKey, list[HistogramPoint]] = {}
    used = None
    for sc in scrapes:
        name, found = _series(sc, m.names)
        for s in found:
            pt = _hist_point(s)
            if pt is not None:
                used = used or name
                by_series.setdefault(_label_key(s), []).append(pt)
    parts = [w for pts in by_series.values() if (w := _series_window(pts)) is not None]
    if used is None or not parts:
        return None
    bounds = sorted(set.intersection(*(set(p.buckets) for p in parts)))
    if not bounds or bounds[-1] != float("inf"):
        return None  # no +Inf bucket: no total to rank against
    window = [(le, sum(p.buckets[le] for p in parts)) for le in bounds]
    total_s, count = sum(p.sum for p in parts), sum(p.count for p in parts)
    qs = [bucket_quantile(q, window) for q in QUANTILES]
    f = m.factor
    return QuantileStat(count, total_s * f / count if count > 0 else None,
                        None if qs[0][0] is None else qs[0][0] * f, None if qs[1][0] is None else qs[1][0] * f,
                        used, len(bounds), qs[0][1] or qs[1][1])


def serving_metrics(records: Iterable[ServingRecord | Mapping[str, Any]]) -> ServingMetrics | None:
    """The SERVING stream's records (``Bundle.typed(SERVING)``, or plain dicts: ``read_scrapes``)
    -> window statistics; None when it holds no scrape."""
    read = read_scrapes(records)
    scrapes = read.scrapes
    if not scrapes:
        return None
    engine = _engine(read.source, scrapes)
    window_s = (scrapes[-1].t_ns - scrapes[0].t_ns) / 1e9
    gauges, rates, hists = {}, {}, {}
    points = {}
    for m in TABLE[engine] if engine is not None else ():
        if m.kind is Kind.GAUGE:
            points[m.signal] = _gauge_points(m, scrapes)
            if (g := _stat(*points[m.signal])) is not None:
                gauges[m.signal] = g
        elif m.kind is Kind.COUNTER and (r := _counter(m, scrapes, window_s)) is not None:
            rates[m.signal] = r
        elif m.kind is Kind.HISTOGRAM and (h := _histogram(m, scrapes)) is not None:
            hists[m.signal] = h
    if (flight := _in_flight(points)) is not None:
        gauges["in_flight"] = flight
    garbage = sum(sc.record.garbage for sc in scrapes)
    examples = tuple(x[:200] for sc in scrapes for x in sc.record.garbage_lines[:5])[:5]
    dropped = sum(sc.record.dropped for sc in scrapes)
    url = read.source.url if read.source is not None else ""
    return ServingMetrics(engine, url, len(scrapes), window_s, gauges, rates, hists,
                          tuple(read.errors), garbage, examples, dropped)


def _engine(source: ServingSourceRecord | None, scrapes: list[Scrape]) -> Engine | None:
    engine = source.known_engine if source is not None else None
    if engine is not None:
        return engine
    counts: dict[Engine, int] = {}  # no source record, or one hand-edited: count the series instead
    for sc in scrapes:
        for s in sc.series:
            counts[METRICS[s.name][0]] = counts.get(METRICS[s.name][0], 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


__all__ = ["GaugeStat", "HistogramPoint", "QuantileStat", "RateStat", "Scrape", "Scrapes", "ServingMetrics",
           "bucket_quantile", "counter_increase", "read_scrapes", "serving_metrics"]

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

from diagnose.catalogs.serving_fields import INF, METRICS, TABLE, Combine, Engine, Kind, ServingMetric

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


@dataclass(frozen=True)
class QuantileStat:
    """Observations in the window and their mean, P50 and P99 (seconds). The quantiles are
    bucket-interpolated (``above_top_bucket``: the rank fell in the +Inf bucket)."""

    count: float
    mean_s: float | None
    p50_s: float | None
    p99_s: float | None
    metric: str
    buckets: int
    above_top_bucket: bool = False


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
    t_ns: int
    series: tuple[dict[str, Any], ...]


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


def read_scrapes(records: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[Scrape], list[str], list[dict]]:
    """(source record, scrapes in time order, error reasons, scrape records) from the stream,
    skipping malformed records."""
    source: dict[str, Any] = {}
    scrapes, errors, raw = [], [], []
    for rec in records:
        kind = rec.get("kind")
        if kind == "source":
            source = rec
        elif kind == "error":
            errors.append(str(rec.get("reason"))[:200])
        elif kind == "scrape" and type(rec.get("t_ns")) is int and isinstance(rec.get("series"), list):
            series = tuple(s for s in rec["series"]
                           if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"] in METRICS)
            scrapes.append(Scrape(rec["t_ns"], series))
            raw.append(rec)
    start = source.get("t_ns")
    if type(start) is int:  # a hand-edited scrape far before the collector started is not in the window
        kept = [i for i, sc in enumerate(scrapes) if sc.t_ns >= start - EARLIEST_BEFORE_SOURCE_NS]
        scrapes, raw = [scrapes[i] for i in kept], [raw[i] for i in kept]
    order = sorted(range(len(scrapes)), key=lambda i: scrapes[i].t_ns)
    return source, [scrapes[i] for i in order], errors, [raw[i] for i in order]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e300 else None


def _series(scrape: Scrape, names: tuple[str, ...]) -> tuple[str | None, list[dict[str, Any]]]:
    """The series of the first of ``names`` (newest first) present in the scrape."""
    for name in names:
        found = [s for s in scrape.series if s["name"] == name.removesuffix("_total")]
        if found:
            return name, found
    return None, []


def _gauge_points(m: ServingMetric, scrapes: list[Scrape]) -> tuple[str | None, dict[int, float]]:
    """(metric name used, {scrape index: combined value in the canonical unit})."""
    points: dict[int, float] = {}
    used = None
    for i, sc in enumerate(scrapes):
        name, found = _series(sc, m.names)
        vals = [v for s in found for v in [_num(s.get("value"))] if v is not None]
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


def _label_key(s: dict[str, Any]) -> tuple:
    labels = s.get("labels")
    if not isinstance(labels, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _counter(m: ServingMetric, scrapes: list[Scrape], window_s: float) -> RateStat | None:
    by_series: dict[tuple, list[float]] = {}
    used = None
    for sc in scrapes:
        name, found = _series(sc, m.names)
        for s in found:
            v = _num(s.get("value"))
            if v is not None:
                used = used or name
                by_series.setdefault(_label_key(s), []).append(v)
    if used is None or window_s <= 0:
        return None
    parts = [counter_increase(vals) for vals in by_series.values()]
    n = len(parts) if m.combine is Combine.MEAN else 1
    inc = sum(p[0] for p in parts) / n * m.factor
    return RateStat(inc, inc / window_s, sum(p[1] for p in parts), used)


def _bound(v: Any) -> float | None:
    """A bucket's upper bound: a number, or "+Inf" (catalogs/serving_fields.py INF)."""
    if v == INF:
        return float("inf")
    return _num(v)


def _hist_point(s: dict[str, Any]) -> tuple[dict[float, float], float, float] | None:
    """One series' histogram at one scrape: (buckets {bound: cumulative count}, sum, count)."""
    b = s.get("buckets")
    if not isinstance(b, list):
        return None
    pts = {le: float(x[1]) for x in b if isinstance(x, list) and len(x) == 2 and _num(x[1]) is not None
           for le in [_bound(x[0])] if le is not None}
    if not pts:
        return None
    count = _num(s.get("count"))
    return pts, _num(s.get("sum")) or 0.0, count if count is not None else max(pts.values())


def _histogram_resets(points: list[tuple[dict[float, float], float, float]], bounds: list[float]) -> set[int]:
    """Scrapes at which the histogram restarted: its count or any bucket went down. A restart
    resets every bucket at once, so it is decided for the histogram, not bucket by bucket."""
    return {i for i in range(1, len(points)) if points[i][2] < points[i - 1][2]
            or any(points[i][0][le] < points[i - 1][0][le] for le in bounds)}


def _increase(values: list[float], resets: set[int]) -> float:
    """Increase over the scrapes, restarting from 0 at each reset."""
    return sum(values[i] if i in resets else values[i] - values[i - 1]
               for i in range(1, len(values)))


def _series_window(points: list[tuple[dict[float, float], float, float]]
                   ) -> tuple[dict[float, float], float, float] | None:
    """One series' increase over the scrapes that hold it, with its own resets: (bucket
    increases over the bounds all its scrapes have, sum increase, count increase); None below two
    scrapes (as Prometheus ``increase()``: a series first seen mid-window counts from there)."""
    if len(points) < 2:
        return None
    bounds = sorted(set.intersection(*(set(p[0]) for p in points)))
    resets = _histogram_resets(points, bounds)
    return ({le: _increase([p[0][le] for p in points], resets) for le in bounds},
            _increase([p[1] for p in points], resets), _increase([p[2] for p in points], resets))


def _histogram(m: ServingMetric, scrapes: list[Scrape]) -> QuantileStat | None:
    """Each series' (labelset's) window increase on its own, then summed bucket by bucket over the
    bounds every such series has: a series that appears or vanishes mid-window adds only what it
    gained while seen, never its history, and is no restart of the others."""
    by_series: dict[tuple, list[tuple[dict[float, float], float, float]]] = {}
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
    bounds = sorted(set.intersection(*(set(p[0]) for p in parts)))
    if not bounds or bounds[-1] != float("inf"):
        return None  # no +Inf bucket: no total to rank against
    window = [(le, sum(p[0][le] for p in parts)) for le in bounds]
    total_s, count = sum(p[1] for p in parts), sum(p[2] for p in parts)
    qs = [bucket_quantile(q, window) for q in QUANTILES]
    f = m.factor
    return QuantileStat(count, total_s * f / count if count > 0 else None,
                        None if qs[0][0] is None else qs[0][0] * f, None if qs[1][0] is None else qs[1][0] * f,
                        used, len(bounds), qs[0][1] or qs[1][1])


def serving_metrics(records: Iterable[dict[str, Any]]) -> ServingMetrics | None:
    """The SERVING stream's records -> window statistics; None when it holds no scrape."""
    source, scrapes, errors, raw = read_scrapes(records)
    if not scrapes:
        return None
    engine = _engine(source, scrapes)
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
    garbage = sum(int(r["garbage"]) for r in raw if type(r.get("garbage")) is int)
    examples = tuple(str(x)[:200] for r in raw for x in (r.get("garbage_lines") or [])[:5]
                     if isinstance(r.get("garbage_lines"), list))[:5]
    dropped = sum(int(r["dropped"]) for r in raw if type(r.get("dropped")) is int)
    return ServingMetrics(engine, str(source.get("url") or ""), len(scrapes), window_s, gauges, rates, hists,
                          tuple(errors), garbage, examples, dropped)


def _engine(source: dict[str, Any], scrapes: list[Scrape]) -> Engine | None:
    try:
        return Engine(source.get("engine"))
    except ValueError:  # no source record, or one hand-edited: count the series instead
        counts: dict[Engine, int] = {}
        for sc in scrapes:
            for s in sc.series:
                counts[METRICS[s["name"]][0]] = counts.get(METRICS[s["name"]][0], 0) + 1
        return max(counts, key=counts.__getitem__) if counts else None


__all__ = ["GaugeStat", "QuantileStat", "RateStat", "Scrape", "ServingMetrics", "bucket_quantile",
           "counter_increase", "read_scrapes", "serving_metrics"]

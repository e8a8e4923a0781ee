"""Signals from a serving engine's own /metrics (collectors/serving_metrics.py): in-flight, queue
share of end-to-end latency, TTFT/ITL/TPOT P50/P99, KV-cache usage, preemptions, SGLang's GPU
overlap wait. Pure: reads the SERVING stream; the window statistics are serving_metrics.py's.

Definitions (the report states them): TTFT = request arrival to its first output token (queueing
and prefill included); ITL = the time between two consecutive output tokens of one request (vLLM's
and SGLang's inter_token_latency histograms observe every gap); TPOT = (e2e - TTFT) / (output
tokens - 1), the mean per request (vLLM's request_time_per_output_token, TGI's
request_mean_time_per_token observe one value per request). P50/P99 come from the engine's
histogram buckets over the capture window, linearly interpolated inside a bucket.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from diagnose.bundle import Bundle
from diagnose.bundle.streams import SERVING
from diagnose.model import Signal
from diagnose.results.quality import DataQuality, ServingQuality
from diagnose.signals.base import SourceResult, collector_reason
from diagnose.signals.params import DEFAULT_PARAMS, AnalysisParams
from diagnose.signals.serving_metrics import ServingMetrics, serving_metrics

DEFINITIONS = ("TTFT: request arrival to its first output token (queueing and prefill included); "
               "ITL: time between consecutive output tokens of one request (vLLM's and SGLang's ITL "
               "histograms observe every such gap); "
               "TPOT: (e2e - TTFT) / (output tokens - 1), the mean per request (one observation per request); "
               "P50/P99 are bucket-interpolated from the engine's histograms over the capture window "
               "(exact only to a bucket's width), means are exact (increase of _sum / increase of _count)")
LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "end-to-end latency"),
             ("queue", "queue time"))
GAUGES = (("in_flight", "in_flight", "", "requests"), ("running", "running", "", "requests"),
          ("waiting", "waiting", "", "requests"), ("kv_usage", "kv_cache_usage", "_pct", "%"))
RATES = (("requests", "qps", "1/s"), ("prompt_tokens", "prompt_tokens_per_s", "tokens/s"),
         ("output_tokens", "output_tokens_per_s", "tokens/s"), ("preemptions", "preemptions_per_s", "1/s"))


def _src(sm: ServingMetrics, metric: str, how: str) -> str:
    engine = sm.engine.value if sm.engine else "engine"
    return f"{engine} /metrics {metric} ({how}, {sm.scrapes} scrapes over {sm.window_s:.1f} s)"


def _signals(sm: ServingMetrics) -> dict[str, Signal]:
    out: dict[str, Signal] = {}

    def put(name: str, value: float | None, unit: str, source: str) -> None:
        out[name] = Signal(name, value, unit, source)

    for key, name, suffix, unit in GAUGES:
        g = sm.gauges.get(key)
        if g is not None:
            put(f"serving.{name}_mean{suffix}", g.mean, unit, _src(sm, g.metric, "mean of scrapes"))
            put(f"serving.{name}_max{suffix}", g.max, unit, _src(sm, g.metric, "max of scrapes"))
    for key, name, unit in RATES:
        r = sm.rates.get(key)
        if r is not None:
            put(f"serving.{name}", r.per_s, unit, _src(sm, r.metric, "increase / window"))
    pre = sm.rates.get("preemptions")
    if pre is not None:
        put("serving.preemptions", pre.increase, "preemptions", _src(sm, pre.metric, "increase over the window"))
    for key, _label in LATENCIES:
        h = sm.histograms.get(key)
        if h is None or not h.count:
            continue
        how = f"bucket-interpolated over {h.count:.0f} observations"
        for q, v in (("p50", h.p50_s), ("p99", h.p99_s)):
            put(f"serving.{key}_{q}_ms", None if v is None else v * 1e3, "ms", _src(sm, h.metric, how))
    share = queue_share(sm)
    if share is not None:
        put("serving.queue_share_pct", share[0], "%", share[1])
    wait = sm.rates.get("overlap_wait")
    if wait is not None and sm.window_s > 0:
        put("serving.gpu_overlap_wait_pct", 100.0 * wait.increase / sm.window_s, "%",
            _src(sm, wait.metric, "increase / window, mean over ranks"))
    return out


def queue_share(sm: ServingMetrics) -> tuple[float, str] | None:
    """(queue time as % of end-to-end latency over the window's requests, source): increase of the
    queue histogram's _sum over that of the e2e one (Triton: of the cumulative duration counters)."""
    q, e = sm.histograms.get("queue"), sm.histograms.get("e2e")
    if q is not None and e is not None and q.mean_s is not None and e.mean_s and q.count and e.count:
        return (100.0 * q.mean_s * q.count / (e.mean_s * e.count),
                _src(sm, f"{q.metric}_sum / {e.metric}_sum", "increase over the window"))
    qt, et = sm.rates.get("queue_total"), sm.rates.get("e2e_total")
    if qt is not None and et is not None and et.increase > 0:
        return 100.0 * qt.increase / et.increase, _src(sm, f"{qt.metric} / {et.metric}", "increase over the window")
    return None


DETAILS_KEY = "serving"  # the source's table in ``details``


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
    above_top_bucket: bool


class ServingDetails(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON-ready table the report, the account and the terminal read (``details["serving"]``);
    ``gauges``, ``rates`` and ``histograms`` keyed by the canonical signals of TABLE."""

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

    @classmethod
    def of(cls, details: Mapping[str, Any]) -> ServingDetails | None:
        """An analysis' ``details`` table of this source, typed; None without one (no scrapes, or a
        table of another shape)."""
        raw = details.get(DETAILS_KEY)
        if raw is None or isinstance(raw, cls):
            return raw
        try:
            return msgspec.convert(raw, cls)
        except msgspec.ValidationError:
            return None


def serving_details(sm: ServingMetrics) -> ServingDetails:
    return ServingDetails(
        engine=sm.engine.value if sm.engine else None, url=sm.url, scrapes=sm.scrapes,
        window_s=round(sm.window_s, 3),
        gauges={k: GaugeDetail(g.mean, g.max, g.metric) for k, g in sm.gauges.items()},
        rates={k: RateDetail(r.increase, r.per_s, r.resets, r.metric) for k, r in sm.rates.items()},
        histograms={k: HistogramDetail(h.count, h.mean_s, h.p50_s, h.p99_s, h.metric, h.buckets, h.above_top_bucket)
                    for k, h in sm.histograms.items()},
        queue_share_pct=(queue_share(sm) or (None,))[0],
        errors=list(sm.errors[:5]), scrape_errors=len(sm.errors), garbage_lines=sm.garbage_lines,
        garbage_examples=list(sm.garbage_examples), dropped=sm.dropped, definitions=DEFINITIONS)


def details(sm: ServingMetrics) -> dict[str, Any]:
    """The JSON-ready table the report reads (``details["serving"]``: ServingDetails as JSON)."""
    out: dict[str, Any] = msgspec.to_builtins(serving_details(sm))
    return out


def serving_signals(bundle: Bundle, params: AnalysisParams = DEFAULT_PARAMS) -> SourceResult:
    """Signals of family ``serving.`` (diagnose/signals/catalog.py); none without the stream."""
    if not bundle.has(SERVING.name):
        return SourceResult({})
    sm = serving_metrics(bundle.typed(SERVING))
    if sm is None:
        why = collector_reason(bundle, "serving")
        return SourceResult({}, DataQuality(serving=ServingQuality(scrapes=0, reason=why)))
    dq = ServingQuality(scrapes=sm.scrapes, scrape_errors=len(sm.errors), garbage_lines=sm.garbage_lines)
    return SourceResult(_signals(sm), DataQuality(serving=dq), {DETAILS_KEY: details(sm)})


__all__ = ["DEFINITIONS", "DETAILS_KEY", "GaugeDetail", "HistogramDetail", "RateDetail", "ServingDetails", "details",
           "queue_share", "serving_details", "serving_signals"]

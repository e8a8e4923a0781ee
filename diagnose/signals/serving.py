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

from diagnose.bundle import Bundle
from diagnose.bundle.streams import SERVING
from diagnose.model import Signal
from diagnose.results.details import Details
from diagnose.results.quality import DataQuality, ServingQuality
from diagnose.results.serving import GaugeDetail, HistogramDetail, RateDetail, ServingDetails
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


def serving_details(sm: ServingMetrics) -> ServingDetails:
    return ServingDetails(
        engine=sm.engine.value if sm.engine else None, url=sm.url, scrapes=sm.scrapes,
        window_s=round(sm.window_s, 3),
        gauges={k: GaugeDetail(g.mean, g.max, g.metric) for k, g in sm.gauges.items()},
        rates={k: RateDetail(r.increase, r.per_s, r.resets, r.metric) for k, r in sm.rates.items()},
        histograms=dict(sm.histograms),
        queue_share_pct=(queue_share(sm) or (None,))[0],
        errors=list(sm.errors[:5]), scrape_errors=len(sm.errors), garbage_lines=sm.garbage_lines,
        garbage_examples=list(sm.garbage_examples), dropped=sm.dropped, definitions=DEFINITIONS)


def serving_signals(bundle: Bundle, params: AnalysisParams = DEFAULT_PARAMS) -> SourceResult:
    """Signals of family ``serving.`` (diagnose/signals/catalog.py); none without the stream."""
    if not bundle.has(SERVING.name):
        return SourceResult({})
    sm = serving_metrics(bundle.typed(SERVING))
    if sm is None:
        why = collector_reason(bundle, "serving")
        return SourceResult({}, DataQuality(serving=ServingQuality(scrapes=0, reason=why)))
    dq = ServingQuality(scrapes=sm.scrapes, scrape_errors=len(sm.errors), garbage_lines=sm.garbage_lines)
    return SourceResult(_signals(sm), DataQuality(serving=dq), Details(serving=serving_details(sm)))


__all__ = ["DEFINITIONS", "GaugeDetail", "HistogramDetail", "RateDetail", "ServingDetails", "queue_share",
           "serving_details", "serving_signals"]

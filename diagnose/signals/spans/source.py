"""Span summaries -> Signals: spans.* (latency, QPS, concurrency, stages, tail) and llm.*."""
from __future__ import annotations

from diagnose.bundle.streams import GC
from diagnose.catalogs.stages import STAGES
from diagnose.model import Signal, missing
from diagnose.results.spans import LlmDetail, RequestsDetail, TailDetail

SRC = "spans (OpenTelemetry, root span = request)"
NO_SPANS = ("no stage spans in this capture: start the service under `diagnose run` (agent) or "
            "send OTLP spans to the receiver")
LATENCY = (("spans.p50_ms", "p50_ms"), ("spans.p90_ms", "p90_ms"), ("spans.p95_ms", "p95_ms"),
           ("spans.p99_ms", "p99_ms"), ("spans.p999_ms", "p999_ms"), ("spans.mean_ms", "mean_ms"))


GC_SIGNALS = ("spans.tail_gc_overlap_pct", "spans.tail_gc_overlap_excess_pct")


def request_signals(summary: RequestsDetail, tail: TailDetail, reason: str) -> dict[str, Signal]:
    lat = summary.latency
    if not summary.requests or lat is None:
        out = {n: missing(n, "ms", SRC, reason) for n, _ in LATENCY}
        out["spans.qps"] = missing("spans.qps", "1/s", SRC, reason)
        for n in [f"spans.stage_share_pct[{st}]" for st in STAGES] + list(GC_SIGNALS):
            out[n] = missing(n, "%", SRC, reason)
        return out
    cov = summary.coverage
    part = (f" (spans dropped: over the {cov.covered_s:.2f} s of the {cov.window_s:.2f} s window the kept "
            "spans cover)") if cov else ""
    one_in = summary.sampled_one_in
    scaled = f", a 1-in-{one_in} sample of traces scaled by {one_in}" if one_in else ""
    sample = f" (a 1-in-{one_in} sample of traces)" if one_in else ""
    out = {n: Signal(n, getattr(lat, k), "ms", SRC + f", {lat.count} requests{sample}{part}") for n, k in LATENCY}
    estimated = summary.requests_estimated if summary.requests_estimated is not None else summary.requests
    out["spans.requests"] = Signal("spans.requests", float(estimated), "requests",
                                   SRC + (f", {summary.requests} sampled{scaled}" if one_in else "") + part)
    out["spans.qps"] = Signal("spans.qps", summary.qps, "1/s", SRC + ", requests ended per second of the "
                              + ("covered part of the window" + part if cov else "window") + scaled)
    out["spans.in_flight_mean"] = Signal("spans.in_flight_mean", summary.in_flight_measured_mean, "requests",
                                         SRC + ", time-average of open requests (sweep)" + scaled)
    out["spans.in_flight_littles_law"] = Signal("spans.in_flight_littles_law", summary.in_flight_littles_law,
                                                "requests", SRC + ", QPS x mean latency")
    if summary.ended_outside_window:
        why = (f"none of the {summary.ended_outside_window} requests ended inside the capture window: the spans' "
               "clock is not the capture's, or they are of another time")
        for n, unit in (("spans.qps", "1/s"), ("spans.in_flight_mean", "requests"),
                        ("spans.in_flight_littles_law", "requests")):
            out[n] = missing(n, unit, SRC, why)
    for st in STAGES:
        n = f"spans.stage_share_pct[{st}]"
        out[n] = Signal(n, summary.stage_share_pct[st], "%", SRC + ", stage spans (catalogs/stages.py) "
                        "inside requests / request time")
    if tail.gc_overlap_pct is not None:
        out["spans.tail_gc_overlap_pct"] = Signal("spans.tail_gc_overlap_pct", tail.gc_overlap_pct, "%",
                                                  SRC + f" + {GC.name}, slowest 1% overlapping a GC pause")
        out["spans.tail_gc_overlap_excess_pct"] = Signal(
            "spans.tail_gc_overlap_excess_pct", tail.gc_overlap_pct - (tail.gc_overlap_all_pct or 0.0), "%",
            SRC + f" + {GC.name}, slowest 1% minus all requests overlapping a GC pause (percentage points)")
    else:
        for n in GC_SIGNALS:
            out[n] = missing(n, "%", SRC, f"no GC pauses recorded ({GC.name} absent or empty)")
    return out


def llm_signals(llm: LlmDetail) -> dict[str, Signal]:
    out: dict[str, Signal] = {}
    src = SRC + ", gen_ai attributes / first-token events"
    for metric in ("ttft", "tpot"):
        for q in ("p50", "p99"):
            n = f"llm.{metric}_{q}_ms"
            v = getattr(getattr(llm, metric), f"{q}_ms")
            why = f"no span carries {metric.upper()} (gen_ai attributes or a first-token event)"
            out[n] = Signal(n, v, "ms", src) if v is not None else missing(n, "ms", src, why)
    if llm.phases is not None:
        ph = llm.phases
        for name, v in (("ttft_share_pct", ph.ttft_share_pct), ("decode_share_pct", ph.decode_share_pct)):
            out[f"llm.{name}"] = Signal(f"llm.{name}", v, "%", src + ", generation time split at the first token")
    if llm.output_tokens_per_s is not None:
        out["llm.output_tokens_per_s"] = Signal("llm.output_tokens_per_s", llm.output_tokens_per_s, "tokens/s",
                                                src + ", gen_ai.usage.output_tokens")
    return out


__all__ = ["NO_SPANS", "llm_signals", "request_signals"]

"""LLM latency from spans: TTFT (time to first token) and TPOT (time per output token).

Sources, in order: the gen_ai attributes (``gen_ai.server.time_to_first_token`` /
``time_per_output_token`` in seconds, vLLM's ``gen_ai.latency.*``), else a first-token span event
(TTFT = event time - span start). TPOT without an attribute = (latency - TTFT) / (output tokens - 1),
output tokens from ``gen_ai.usage.output_tokens`` (or the older ``completion_tokens``).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from diagnose.bundle.records.spans import MAX_NUMBER, MAX_SPAN_NS, attribute_number
from diagnose.catalogs.stages import (
    FIRST_TOKEN_EVENT,
    OUTPUT_TOKEN_ATTRIBUTES,
    TPOT_ATTRIBUTES,
    TTFT_ATTRIBUTES,
    Stage,
)
from diagnose.signals.spans.analytics import Span, stage_of


def _num(attrs: dict[str, Any], keys: tuple[str, ...], limit: float = MAX_NUMBER) -> float | None:
    """The first of ``keys`` that is a number in [0, ``limit``] (records/spans.py attribute_number)."""
    for k in keys:
        v = attribute_number(attrs, k, limit)
        if v is not None:
            return v
    return None


def ttft_ns(span: Span) -> int | None:
    v = _num(span.attributes, TTFT_ATTRIBUTES, MAX_SPAN_NS / 1e9)  # seconds; longer is no span's
    if v is not None:
        return int(v * 1e9)
    rx = re.compile(FIRST_TOKEN_EVENT)
    for ev in span.events:
        if ev.t_ns is not None and rx.search(ev.name) and ev.t_ns >= span.start_ns:
            return ev.t_ns - span.start_ns
    return None


def tpot_ns(span: Span, ttft: int | None) -> float | None:
    v = _num(span.attributes, TPOT_ATTRIBUTES, MAX_SPAN_NS / 1e9)
    if v is not None:
        return v * 1e9
    tokens = _num(span.attributes, OUTPUT_TOKEN_ATTRIBUTES)
    if ttft is None or tokens is None or tokens < 2:
        return None
    return (span.dur_ns - ttft) / (tokens - 1)


def _queue_ns(spans: list[Span]) -> dict[tuple[str, str], int]:
    """Per span (trace id, span id): the time its direct children of the queue stage were open (ns)."""
    out: dict[tuple[str, str], int] = {}
    for s in spans:
        if s.parent_span_id and stage_of(s) == Stage.QUEUE:
            key = (s.trace_id, s.parent_span_id)
            out[key] = out.get(key, 0) + s.dur_ns
    return out


def llm_summary(spans: list[Span], window_s: float | None, scale: float = 1.0) -> dict[str, Any]:
    """TTFT/TPOT percentiles (ms) and output tokens per second over the window; ``scale``: N when
    the spans are a 1-in-N sample of traces (the tokens are the sample's times N). ``phases``: the
    generations' time split at their first token: before it (``ttft_share_pct``; of it, waiting in
    ``queue``-stage spans under the generation, ``queue_share_pct``, and the rest prefill,
    ``prefill_share_pct``) and after it (decode, ``decode_share_pct``), % of ``generation_s``; None
    without TTFT."""
    ttft: list[int] = []
    tpot: list[float] = []
    tokens = 0.0
    first_ns = decode_ns = queue_ns = 0
    queued = _queue_ns(spans)
    for s in spans:
        t = ttft_ns(s)
        p = tpot_ns(s, t)
        n = _num(s.attributes, OUTPUT_TOKEN_ATTRIBUTES)
        if t is None and p is None and n is None:
            continue
        if t is not None:
            ttft.append(t)
            if t <= s.dur_ns:  # a generation: up to its first token (queue + prefill), then decode
                first_ns += t
                decode_ns += s.dur_ns - t
                queue_ns += min(t, queued.get((s.trace_id, s.span_id), 0))
        if p is not None:
            tpot.append(p)
        tokens += (n or 0.0) * scale

    def pct(values: Sequence[float]) -> dict[str, float | None]:
        if not values:
            return {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None}
        p50, p90, p99 = np.percentile(np.array(values, float), [50, 90, 99]) / 1e6
        return {"count": len(values), "p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99)}

    gen = first_ns + decode_ns
    phases = {"generation_s": gen / 1e9, "ttft_share_pct": 100.0 * first_ns / gen,
              "queue_share_pct": 100.0 * queue_ns / gen, "prefill_share_pct": 100.0 * (first_ns - queue_ns) / gen,
              "decode_share_pct": 100.0 * decode_ns / gen} if gen > 0 else None
    return {"ttft": pct(ttft), "tpot": pct(tpot), "output_tokens": tokens,
            "output_tokens_per_s": tokens / window_s if tokens and window_s else None, "phases": phases}


__all__ = ["llm_summary", "tpot_ns", "ttft_ns"]

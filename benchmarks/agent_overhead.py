"""Cost of the in-process agent to the service: per-span overhead of the SpanProcessor when idle
and while a capture records, and of the GC callback. Prints per-operation times and ratios.

    python benchmarks/agent_overhead.py [--spans 50000]

Idle target: the agent's processor on the provider but no capture (two attribute reads per span).
Capturing: spans are queued for the capture thread (no I/O in the application's thread).
"""
from __future__ import annotations

import argparse
import gc
import time

from opentelemetry.sdk.trace import TracerProvider

from diagnose.agent.inproc import spans as agent_spans
from diagnose.agent.inproc.gcpause import GcRecorder


def per_span_us(provider: TracerProvider, n: int, sink: agent_spans.SpanSink | None = None) -> float:
    """Mean cost of one span; with a sink, queued spans are taken every 1000 spans, as the
    capture thread does every 0.25 s (left queued, 50k live spans would slow the GC instead)."""
    tracer = provider.get_tracer("bench")
    t0 = time.perf_counter()
    for i in range(n):
        with tracer.start_as_current_span("stage"):
            pass
        if sink is not None and i % 1000 == 0:
            sink.take_finished()
    return (time.perf_counter() - t0) / n * 1e6


def gc_us(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        gc.collect(0)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=50_000)
    n = ap.parse_args().spans

    base = per_span_us(TracerProvider(), n)
    provider = TracerProvider()
    provider.add_span_processor(agent_spans._processor_class()())
    idle = per_span_us(provider, n)
    agent_spans.HOOKS.sink = sink = agent_spans.SpanSink()
    capturing = per_span_us(provider, n, sink)
    agent_spans.HOOKS.sink = None

    gc_base = gc_us(2000)
    rec = GcRecorder()
    rec.install()
    gc_hooked = gc_us(2000)
    rec.remove()

    print(f"span start+end, SDK alone:           {base:7.2f} us")
    print(f"  + agent processor, idle:           {idle:7.2f} us  (x{idle / base:.3f})")
    print(f"  + agent processor, capturing:      {capturing:7.2f} us  (x{capturing / base:.3f})")
    print(f"gc.collect(0) alone:                 {gc_base:7.2f} us")
    print(f"  + agent GC callback (capture only): {gc_hooked:7.2f} us  (x{gc_hooked / gc_base:.3f})")


if __name__ == "__main__":
    main()

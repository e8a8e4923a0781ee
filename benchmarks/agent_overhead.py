"""Cost of the in-process agent to the service: per-span overhead of the SpanProcessor when idle
and while a capture records, and of the GC callback; then the throughput of a loop making spans as
fast as it can (a request = a server span and a child span) without a capture, during a real
capture (CaptureSession: the capture thread converting, writing and sampling by its CPU budget)
and right after it. Prints per-operation times and ratios.

    python benchmarks/agent_overhead.py [--spans 50000] [--flood-s 3]

Idle target: the agent's processor on the provider but no capture (two attribute reads per span).
Capturing: spans are queued for the capture thread (no I/O in the application's thread).
"""
from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from diagnose.agent.inproc import spans as agent_spans
from diagnose.agent.inproc.capture import CaptureRequest, CaptureSession
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


def requests_per_s(tracer, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(32):
            with tracer.start_as_current_span("request"):
                with tracer.start_as_current_span("SELECT"):
                    pass
        n += 32
    return n / (time.perf_counter() - t0)


def flood(provider: TracerProvider, seconds: float) -> None:
    """Loop throughput before, during and after one capture of ``seconds``."""
    tracer = provider.get_tracer("flood")
    before = requests_per_s(tracer, seconds)
    with tempfile.TemporaryDirectory() as out:
        session = CaptureSession(1, CaptureRequest(Path(out), 3600, torch=False, gc=False), Path(out), None)
        session.start()
        during = requests_per_s(tracer, seconds)
        t0 = time.perf_counter()
        session.request_stop()
        session.wait(30)
        stop_s = time.perf_counter() - t0
        after = requests_per_s(tracer, seconds)
        c = session.report()["parts"]["spans"]["counts"]
    print(f"span flood, no capture:              {before:9,.0f} requests/s (2 spans each)")
    print(f"  during a capture:                  {during:9,.0f} requests/s  (x{during / before:.3f})")
    print(f"  after it:                          {after:9,.0f} requests/s  (x{after / before:.3f}); stop took "
          f"{stop_s * 1e3:.0f} ms")
    print(f"  agent: kept 1 trace in {round(1 / c['spans_keep_fraction'])}, {c['spans_kept']:,} of "
          f"{c['spans_seen']:,} spans; span work {c['spans_cpu_s']:.3f} s CPU = {c['spans_cpu_pct']:.1f}% of a "
          f"core (budget {c['spans_cpu_budget_pct']:g}%); dropped {c['spans_dropped']}")


def gc_us(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        gc.collect(0)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=50_000)
    ap.add_argument("--flood-s", type=float, default=3.0, help="seconds per flood phase; 0 skips it")
    args = ap.parse_args()
    n = args.spans

    base = per_span_us(TracerProvider(), n)
    provider = TracerProvider()
    provider.add_span_processor(agent_spans.new_processor())
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
    if args.flood_s > 0:
        flood(provider, args.flood_s)


if __name__ == "__main__":
    main()

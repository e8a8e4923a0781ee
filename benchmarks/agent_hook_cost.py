"""Where the in-process agent's per-request cost goes: CPU time (``time.thread_time``, so a busy host
slows nothing but the wall clock) per span through the real OpenTelemetry SDK, without the agent
(the reference) and with its span processor, part by part, side by side.

    python benchmarks/agent_hook_cost.py [--rounds 5] [--requests 4000] [--synthetic-heap N]

Parts, each the median over ``--rounds`` of the CPU per call (us):

- span (SDK alone)    ``tracer.start_span(...).end()`` with two attributes: what a span costs anyway
- on_start / on_end   the agent's processor methods on real SDK spans: idle (no capture), capturing
                      with the trace kept, capturing with the trace sampled out (head sampling rejects)
- conversion          ``span_record`` + the JSON line written, per kept span (the capture thread)
- GC callback         one collection's "start" + "stop" callbacks (the GC recorder, capture only)
- request             a demo-like request (a server span and four stage spans, one dict/list payload
                      built and encoded) on this thread: no agent, agent idle, capturing (every trace
                      kept / every trace sampled out, drained every 0.25 s like the capture thread),
                      plus the GC pauses it triggered (measured by our own gc callback, thread time)

The heap is what the demo service has (torch, aiohttp, the SDK imported: ~190k tracked objects,
where a full collection takes ~0.1 s), or ``--synthetic-heap N`` long-lived objects when those are
not installed: spans the agent keeps alive until the drain are promoted to the old generation and
bring the next full collection closer, so the cost of keeping them depends on the heap.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from diagnose.agent.inproc import spans as agent_spans
from diagnose.agent.inproc.bridge import Bridge
from diagnose.agent.inproc.gcpause import GcRecorder
from diagnose.agent.inproc.spanbudget import KEEP_ALL
from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import SPANS

STAGES = ("preprocess", "queue", "model.forward", "serialize")
SPANS_PER_REQUEST = 1 + len(STAGES)
DRAIN_S = 0.25  # the capture thread's drain period (capture.DRAIN_PERIOD_S)


def _heap(synthetic: int) -> str:
    """Make the process's heap look like the demo service's; returns what it did."""
    if synthetic <= 0:
        try:
            import aiohttp  # noqa: F401
            import torch  # noqa: F401
            from opentelemetry.sdk.resources import Resource  # noqa: F401
            return f"demo imports (torch, aiohttp, SDK): {len(gc.get_objects()):,} tracked objects"
        except ImportError:
            synthetic = 190_000
    _heap.keep = [[i] for i in range(synthetic)]  # type: ignore[attr-defined]
    gc.collect()
    return f"synthetic: {len(gc.get_objects()):,} tracked objects"


def cpu_per_call_us(fn: Callable[[int], None], n: int) -> float:
    t0 = time.thread_time()
    fn(n)
    return (time.thread_time() - t0) / n * 1e6


class GcClock:
    """Our own gc callback: CPU spent inside collections (on whichever thread ran them: every
    thread waits for a collection, it holds the GIL), their count and the full ones."""

    def __init__(self) -> None:
        self.cpu_s, self.full = 0.0, 0
        self._t0: dict[int, float] = {}

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0[threading.get_ident()] = time.thread_time()
        else:
            self.cpu_s += time.thread_time() - self._t0.pop(threading.get_ident(), time.thread_time())
            self.full += info.get("generation") == 2


def part_costs(n: int) -> dict[str, float]:
    """Per-call CPU (us) of the processor's methods and of the conversion, on real SDK spans, with
    the collector off (what the parts leave to the collector is the requests' "in GC" column)."""
    gc.collect()
    gc.disable()
    try:
        return _part_costs(n)
    finally:
        gc.enable()


def _part_costs(n: int) -> dict[str, float]:
    provider = TracerProvider()
    tracer = provider.get_tracer("bench")
    proc = agent_spans._processor_class()()
    live = [tracer.start_span("stage", attributes={"a": 1, "b": "x"}) for _ in range(n)]
    for s in live:
        s.end()
    readable = [s._readable_span() for s in live]  # type: ignore[attr-defined]  # what on_end is handed
    hooks = agent_spans.HOOKS
    hooks.bridge = Bridge(None)  # as the agent's runtime sets it: no NVTX, no torch window running
    out: dict[str, float] = {}

    def run(name: str, bound: int | None) -> None:
        sink = agent_spans.SpanSink()
        if bound is not None:
            sink.bound = bound
        hooks.sink = sink if bound is not None else None
        t0 = time.thread_time()
        for s in live:
            proc.on_start(s)
        t1 = time.thread_time()
        for r in readable:
            proc.on_end(r)
        t2 = time.thread_time()
        hooks.sink = None
        out[f"on_start, {name}"] = (t1 - t0) / n * 1e6
        out[f"on_end, {name}"] = (t2 - t1) / n * 1e6

    run("idle", None)
    run("kept", KEEP_ALL)
    run("sampled out", 0)
    t0 = time.thread_time()
    for _ in range(n):
        tracer.start_span("stage", attributes={"a": 1, "b": "x"}).end()
    out["span start + end, SDK alone (reference)"] = (time.thread_time() - t0) / n * 1e6
    with tempfile.TemporaryDirectory() as tmp:
        writer = BundleWriter(Path(tmp))
        stream = writer.stream(SPANS.name)
        t0 = time.thread_time()
        for i in range(0, n, 64):
            stream.write_many([agent_spans.span_record(r) for r in readable[i:i + 64]])
        out["conversion + write, per kept span (capture thread)"] = (time.thread_time() - t0) / n * 1e6
        writer.close()
    rec, info = GcRecorder(), {"generation": 0, "collected": 0, "uncollectable": 0}
    t0 = time.thread_time()
    for _ in range(n):
        rec("start", info)
        rec("stop", info)
    out["GC callback, per collection"] = (time.thread_time() - t0) / n * 1e6
    return out


def request(tracer, i: int) -> None:
    """A demo-like request: a server span, four stage spans, a payload built and encoded."""
    with tracer.start_as_current_span("POST /predict", attributes={"http.request.method": "POST",
                                                                   "url.path": "/predict"}) as root:
        with tracer.start_as_current_span("preprocess"):
            rows = [{"id": j, "v": [j, j + 1, j + 2]} for j in range(24)]
        now = time.time_ns()
        tracer.start_span("queue", start_time=now - 2000).end(end_time=now - 1000)
        tracer.start_span("model.forward", start_time=now - 1000, attributes={"batch.size": 4}).end(end_time=now)
        with tracer.start_as_current_span("serialize") as sp:
            data = json.dumps({"outputs": rows, "i": i})
            sp.set_attribute("response.bytes", len(data))
        root.set_attribute("request.rows", len(rows))


class Drain:
    """Takes the sink's queued entries every DRAIN_S on its own thread and drops them (the capture
    thread's take without its conversion: that is a separate part)."""

    def __init__(self, sink: agent_spans.SpanSink) -> None:
        self.sink, self.stop = sink, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(DRAIN_S):
            self.sink.take_finished()

    def close(self) -> float:
        self.stop.set()
        self.thread.join()
        self.sink.take_finished()
        return 0.0


class Session:
    """The agent's real capture (CaptureSession, no torch): the capture thread converts, writes and
    samples by its CPU budget. ``close`` returns its span work's CPU (s)."""

    def __init__(self) -> None:
        from diagnose.agent.inproc.capture import CaptureRequest, CaptureSession

        self.tmp = tempfile.TemporaryDirectory()
        out = Path(self.tmp.name)
        self.session = CaptureSession(1, CaptureRequest(out, 3600, torch=False), out, None)
        self.session.start()
        while agent_spans.HOOKS.sink is None:
            time.sleep(0.001)

    def close(self) -> float:
        self.session.request_stop()
        self.session.wait(30)
        counts = self.session.report()["parts"]["spans"]["counts"]
        self.tmp.cleanup()
        return counts["spans_cpu_s"]


CONDITIONS = ("no agent", "agent idle", "capturing, all kept", "capturing, all sampled out",
              "capture session (budgeted)", "no agent (again: the noise)")


def _begin(name: str) -> tuple[bool, Drain | Session | None, GcRecorder | None]:
    """(agent's processor on, what drains, the GC recorder) of one condition."""
    if name.startswith("no agent"):
        return False, None, None
    if name == "agent idle":
        return True, None, None
    if name.startswith("capture session"):
        return True, Session(), None  # the session installs its own GC recorder
    sink = agent_spans.SpanSink()
    sink.bound = KEEP_ALL if name.endswith("kept") else 0
    agent_spans.HOOKS.sink = sink
    recorder = GcRecorder()
    recorder.install()
    return True, Drain(sink), recorder


def request_costs(n: int, seconds_per_condition: float, reverse: bool) -> dict[str, tuple[float, float, int, float]]:
    """Per condition: CPU per request on this thread (us), in collections on any thread (us), full
    collections, and the agent's capture thread's span work per request (us). In reverse order every
    other round: what runs first or last is not always the same condition."""
    provider_ref = TracerProvider()
    provider = TracerProvider()
    provider.add_span_processor(agent_spans._processor_class()())
    agent_spans.HOOKS.bridge = Bridge(None)
    clock = GcClock()
    gc.callbacks.insert(0, clock)
    out: dict[str, tuple[float, float, int, float]] = {}
    try:
        for name in CONDITIONS[::-1] if reverse else CONDITIONS:
            hooked, drain, recorder = _begin(name)
            tracer = (provider if hooked else provider_ref).get_tracer("bench")
            clock.cpu_s, clock.full = 0.0, 0
            done, t0, w0 = 0, time.thread_time(), time.monotonic()
            while done < n or time.monotonic() - w0 < seconds_per_condition:
                request(tracer, done)
                done += 1
            cpu = time.thread_time() - t0
            gc_s, full = clock.cpu_s, clock.full
            if recorder is not None:
                recorder.remove()
                recorder.drain()
            agent_spans.HOOKS.sink = None
            agent_s = drain.close() if drain is not None else 0.0
            out[name] = (cpu / done * 1e6, gc_s / done * 1e6, full, agent_s / done * 1e6)
            gc.collect()
    finally:
        gc.callbacks.remove(clock)
    return out


def _row(name: str, values: list[float], ref: list[float] | None) -> str:
    v = statistics.median(values)
    if ref is None:
        return f"  {name:52s} {v:9.3f}"
    r = statistics.median(ref)
    return f"  {name:52s} {v:9.3f}   x{v / r:6.3f} of {r:.3f}" if r else f"  {name:52s} {v:9.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--spans", type=int, default=20_000, help="spans per part and round")
    ap.add_argument("--requests", type=int, default=4000, help="requests per condition and round (at least)")
    ap.add_argument("--seconds", type=float, default=1.0, help="and at least this long per condition")
    ap.add_argument("--synthetic-heap", type=int, default=0, metavar="N",
                    help="N long-lived objects instead of the demo's imports")
    args = ap.parse_args()
    print(f"heap: {_heap(args.synthetic_heap)}; CPU time per call (thread_time), median of {args.rounds} rounds",
          flush=True)
    parts: dict[str, list[float]] = {}
    reqs: dict[str, list[tuple[float, float, int, float]]] = {}
    request_costs(args.requests // 4, 0.0, False)  # warm-up
    for i in range(args.rounds):
        for k, us in part_costs(args.spans).items():
            parts.setdefault(k, []).append(us)
        for k, rv in request_costs(args.requests, args.seconds, bool(i % 2)).items():
            reqs.setdefault(k, []).append(rv)
    span_ref = parts["span start + end, SDK alone (reference)"]
    print(f"per span (us){'agent':>48s}   against one SDK span ({statistics.median(span_ref):.2f} us)")
    for k, v in parts.items():
        if k.startswith("on_"):
            print(_row(k, v, span_ref))
    for k in ("conversion + write, per kept span (capture thread)", "GC callback, per collection"):
        print(_row(k, parts[k], None))
    ref_cpu = [r[0] for r in reqs["no agent"]]
    print(f"per request of {SPANS_PER_REQUEST} spans (us CPU)     this thread   against no agent     "
          "in GC   full GCs   agent thread")
    for k in CONDITIONS:
        rows = reqs[k]
        gc_us, full, agent_us = (statistics.median(r[i] for r in rows) for i in (1, 2, 3))
        print(f"{_row(k, [r[0] for r in rows], ref_cpu)}   {gc_us:7.2f}   {full:8g}   {agent_us:12.2f}")

if __name__ == "__main__":
    main()

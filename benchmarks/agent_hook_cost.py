"""Where the in-process agent's per-request cost goes: CPU time (``time.thread_time``, so a busy host
slows nothing but the wall clock) per span through the real OpenTelemetry SDK, without the agent
(the reference) and with its span processor, part by part, side by side.

    python benchmarks/agent_hook_cost.py [--rounds 7] [--seconds 3] [--synthetic-heap N]

Parts: the least over ``--rounds`` of the CPU per call (us: the least disturbed round); requests:
the conditions take turns in slices of 100 requests, so that a busy host slows them alike:

- span (SDK alone)    ``tracer.start_span(...).end()`` with two attributes: what a span costs anyway
- on_start / on_end   the agent's processor methods on real SDK spans: idle (no capture), capturing
                      with the trace kept, capturing with the trace sampled out (head sampling rejects)
- conversion          ``span_record`` + the JSON line written, per kept span (the capture thread)
- GC callback         one collection's "start" + "stop" callbacks (the GC recorder, capture only)
- request             a demo-like request (a server span and four stage spans, one dict/list payload
                      built and encoded) on this thread: no agent, agent idle, capturing (every trace
                      kept / every trace sampled out, drained every DRAIN_PERIOD_S like the capture thread;
                      the agent's real capture session, converting under its CPU budget), plus the
                      collections it brought (our own gc callback, thread time, any thread), and
                      the reference again last: the noise

The heap is what the demo service has (torch, aiohttp, the SDK imported: ~190k tracked objects,
where a full collection takes ~0.1 s), or ``--synthetic-heap N`` long-lived objects when those are
not installed: spans the agent keeps alive until the drain are promoted to the old generation and
bring the next full collection closer, so the cost of keeping them depends on the heap.
"""
from __future__ import annotations

import argparse
import gc
import json
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from diagnose.agent.inproc import spans as agent_spans
from diagnose.agent.inproc.bridge import Bridge
from diagnose.agent.inproc.capture import DRAIN_PERIOD_S
from diagnose.agent.inproc.gcpause import GcRecorder
from diagnose.agent.inproc.spanbudget import KEEP_ALL
from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import SPANS

STAGES = ("preprocess", "queue", "model.forward", "serialize")
SPANS_PER_REQUEST = 1 + len(STAGES)
DRAIN_S = DRAIN_PERIOD_S  # drained like the capture thread


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
    proc = agent_spans.new_processor()
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

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sink.take_finished()


class Session:
    """The agent's real capture (CaptureSession, no torch): the capture thread converts, writes and
    samples by its CPU budget. ``close`` returns its span work's CPU (s) and its keep fraction."""

    def __init__(self) -> None:
        from diagnose.agent.inproc.capture import CaptureRequest, CaptureSession

        self.tmp = tempfile.TemporaryDirectory()
        out = Path(self.tmp.name)
        self.session = CaptureSession(1, CaptureRequest(out, 3600, torch=False), out, None)
        self.session.start()
        while agent_spans.HOOKS.sink is None:
            time.sleep(0.001)
        self.sink = agent_spans.HOOKS.sink

    def close(self) -> tuple[float, float]:
        self.session.request_stop()
        self.session.wait(30)
        counts = self.session.report()["parts"]["spans"]["counts"]
        self.tmp.cleanup()
        return counts["spans_cpu_s"], counts["spans_keep_fraction"]


CONDITIONS = ("no agent", "agent idle", "capturing, all kept", "capturing, all sampled out",
              "capture session (budgeted)", "no agent (again: the noise)")
SLICE_REQUESTS = 100  # the conditions take turns by slices this long: a busy host slows them alike


class Tally:
    def __init__(self) -> None:
        self.requests, self.cpu_s, self.gc_s, self.full = 0, 0.0, 0.0, 0


def request_costs(seconds_per_condition: float) -> tuple[dict[str, Tally], float, float]:
    """Each condition in turn, a slice of SLICE_REQUESTS at a time (the order rotating), until each
    had ``seconds_per_condition`` of this thread's CPU. Returns the tallies, the capture session's
    span work (s CPU on its thread) and its final keep fraction."""
    provider_ref, provider = TracerProvider(), TracerProvider()
    provider.add_span_processor(agent_spans.new_processor())
    agent_spans.HOOKS.bridge = Bridge(None)
    kept, out = agent_spans.SpanSink(), agent_spans.SpanSink()
    out.bound = 0
    drains = [Drain(kept), Drain(out)]
    session = Session()  # installs its sink: unset below, set again in its turns
    sinks = {"capturing, all kept": kept, "capturing, all sampled out": out,
             "capture session (budgeted)": session.sink}
    tracers = {c: (provider_ref if c.startswith("no agent") else provider).get_tracer("bench") for c in CONDITIONS}
    clock = GcClock()
    gc.callbacks.insert(0, clock)
    tallies = {c: Tally() for c in CONDITIONS}
    try:
        turn = 0
        while min(t.cpu_s for t in tallies.values()) < seconds_per_condition:
            for name in CONDITIONS[turn % len(CONDITIONS):] + CONDITIONS[:turn % len(CONDITIONS)]:
                tally, tracer = tallies[name], tracers[name]
                agent_spans.HOOKS.sink = sinks.get(name)
                gc0, full0, t0 = clock.cpu_s, clock.full, time.thread_time()
                for i in range(SLICE_REQUESTS):
                    request(tracer, i)
                tally.cpu_s += time.thread_time() - t0
                tally.gc_s += clock.cpu_s - gc0
                tally.full += clock.full - full0
                tally.requests += SLICE_REQUESTS
            turn += 1
    finally:
        agent_spans.HOOKS.sink = session.sink  # the session unsets its own
        agent_s, fraction = session.close()
        for d in drains:
            d.close()
        gc.callbacks.remove(clock)
    return tallies, agent_s, fraction


def _row(name: str, values: list[float], ref: list[float] | None) -> str:
    v = min(values)
    if ref is None:
        return f"  {name:52s} {v:9.3f}"
    r = min(ref)
    return f"  {name:52s} {v:9.3f}   x{v / r:6.3f} of {r:.3f}" if r else f"  {name:52s} {v:9.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="rounds of the per-span parts")
    ap.add_argument("--spans", type=int, default=20_000, help="spans per part and round")
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds of requests per condition")
    ap.add_argument("--synthetic-heap", type=int, default=0, metavar="N",
                    help="N long-lived objects instead of the demo's imports")
    args = ap.parse_args()
    print(f"heap: {_heap(args.synthetic_heap)}; CPU time (thread_time)", flush=True)
    parts: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for k, us in part_costs(args.spans).items():
            parts.setdefault(k, []).append(us)
    span_ref = parts["span start + end, SDK alone (reference)"]
    print(f"per span (us, least of {args.rounds} rounds){'agent':>25s}   against one SDK span ({min(span_ref):.2f} us)")
    for k, v in parts.items():
        if k.startswith("on_"):
            print(_row(k, v, span_ref))
    for k in ("conversion + write, per kept span (capture thread)", "GC callback, per collection"):
        print(_row(k, parts[k], None))
    tallies, agent_s, fraction = request_costs(args.seconds)
    ref = tallies["no agent"]
    print(f"per request of {SPANS_PER_REQUEST} spans (us CPU, conditions in turns of {SLICE_REQUESTS})"
          f"{'this thread':>12s}   against no agent   in GC   full GCs   agent thread")
    for k in CONDITIONS:
        t = tallies[k]
        us, ref_us = t.cpu_s / t.requests * 1e6, ref.cpu_s / ref.requests * 1e6
        agent = (f"{agent_s / t.requests * 1e6:12.2f} (kept 1 in {round(1 / fraction)})"
                 if k.startswith("capture ") else "")
        print(f"  {k:44s} {us:9.2f}   x{us / ref_us:6.3f} {t.gc_s / t.requests * 1e6:9.2f}   {t.full:8d}   {agent}")

if __name__ == "__main__":
    main()

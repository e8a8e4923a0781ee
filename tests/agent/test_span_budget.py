"""Issue 12: the agent's per-span budget. At ~35k spans/s the capture thread's conversion took half a
GIL-bound target's throughput and went on for 12 s after attach exited. Now the hook only compares
the trace id with a bound and appends; the capture thread converts in small batches, measures its
own CPU, samples whole traces by trace id when over SPAN_CPU_SHARE, and discards what its bounded
stop drain cannot convert. Real OpenTelemetry SDK spans, in process (a private TracerProvider: the
global one is never set here)."""
from __future__ import annotations

import json
import random
import time
from collections import defaultdict

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator

from diagnose.agent.host.replies import checked
from diagnose.agent.inproc import capture as capture_mod
from diagnose.agent.inproc import spanbudget
from diagnose.agent.inproc import spans as span_hooks
from diagnose.agent.inproc.capture import CaptureRequest, CaptureSession
from diagnose.agent.inproc.spanbudget import MIN_KEEP_FRACTION, REVIEW_S, SpanBudget, keep_bound, trace_key
from diagnose.bundle.streams import SPANS


class SeededIds(IdGenerator):
    """Random ids from a seed: the same traces on every run."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64)

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128)

    def is_trace_id_random(self) -> bool:
        return True


def _provider(seed: int | None = None) -> TracerProvider:
    provider = TracerProvider(id_generator=SeededIds(seed)) if seed is not None else TracerProvider()
    provider.add_span_processor(span_hooks.new_processor())
    return provider


def _traces(provider: TracerProvider, n: int) -> None:
    tracer = provider.get_tracer("test")
    for _ in range(n):
        with tracer.start_as_current_span("request"):
            with tracer.start_as_current_span("db"):
                pass
            with tracer.start_as_current_span("render"):
                pass


@pytest.fixture
def sink():
    s = span_hooks.SpanSink()
    span_hooks.HOOKS.sink = s
    yield s
    span_hooks.HOOKS.sink = None


def _kept_traces(sink: span_hooks.SpanSink, fraction: float, seed: int) -> dict[int, int]:
    sink.bound = keep_bound(fraction)
    _traces(_provider(seed), 400)
    by_trace: dict[int, int] = defaultdict(int)
    for span in sink.take_finished():
        by_trace[span_hooks.trace_id_of(span)] += 1
    return dict(by_trace)


def test_the_hook_keeps_whole_traces_decided_by_trace_id_alone(sink):
    quarter = _kept_traces(sink, 1 / 4, seed=7)
    assert set(quarter.values()) == {3}  # every span of a kept trace, never part of one
    assert all(trace_key(t) < keep_bound(1 / 4) for t in quarter)
    assert 60 <= len(quarter) <= 140  # ~100 of 400 traces: the key is uniform
    assert sink.sampled_out == 3 * (400 - len(quarter)) and sink.seen == 1200
    assert not sink.open  # every open span was forgotten at its end (on_end gets a new object: keyed by span id)

    assert _kept_traces(sink, 1 / 4, seed=7) == quarter  # the same ids: the same decisions
    eighth = _kept_traces(sink, 1 / 8, seed=7)
    assert set(eighth) < set(quarter) and set(eighth.values()) == {3}  # a lower fraction keeps a subset
    assert set(eighth) == {t for t in quarter if trace_key(t) < keep_bound(1 / 8)}


def test_keep_fraction_halves_while_over_budget_never_below_the_floor_and_never_rises():
    t0 = 10**18
    budget = SpanBudget(t0, share=0.02)  # the figures below are for a 2% share
    seen = 0

    def period(now_s: float, spans_per_s: float, cpu_per_span_s: float, dt: float = 0.25) -> bool:
        nonlocal seen
        arrived = int(spans_per_s * dt)
        seen += arrived
        converted = int(arrived * budget.fraction)
        budget.charge(converted * cpu_per_span_s, converted)
        return budget.review(t0 + int(now_s * 1e9), seen)

    assert not budget.review(t0 + int(REVIEW_S * 1e9 / 2), 10**6)  # too soon to judge a rate
    # 35k spans/s at 25 us each would take 87.5% of a core: halved 6 times, to 1.4% <= 2%
    assert period(0.25, 35_000, 25e-6)
    assert budget.fraction == 1 / 64 and budget.history == [(t0, 1.0), (t0 + 250_000_000, 1 / 64)]
    for i in range(2, 8):  # within budget now: it stays, whatever it costs
        assert not period(0.25 * i, 35_000, 25e-6)
    assert not period(2.25, 2_000, 25e-6)  # the rate fell: the fraction does not rise (traces stay whole)
    assert budget.fraction == 1 / 64
    period(2.5, 10_000_000, 25e-6)  # far past what 1 in 256 fits: the floor holds
    assert budget.fraction == MIN_KEEP_FRACTION and budget.one_in == 256
    fractions = [f for _, f in budget.history]
    assert fractions == sorted(fractions, reverse=True)
    assert budget.cpu_share(t0 + int(2.5e9)) == pytest.approx(budget.cpu_s / 2.5)


def _flood(seconds: float) -> int:
    """Spans as fast as this thread makes them, for ``seconds``; returns the traces made."""
    provider = _provider()
    tracer = provider.get_tracer("flood")
    n, until = 0, time.monotonic() + seconds
    while time.monotonic() < until:
        for _ in range(50):
            with tracer.start_as_current_span("request"):
                with tracer.start_as_current_span("db"):
                    pass
        n += 50
    return n


def _capture(tmp_path, duration_s: float = 30.0) -> CaptureSession:
    session = CaptureSession(1, CaptureRequest(tmp_path, duration_s, torch=False, gc=False), tmp_path, None)
    session.start()
    for _ in range(100):
        if span_hooks.HOOKS.sink is not None:
            return session
        time.sleep(0.01)
    raise AssertionError("the capture never installed its sink")


def test_a_span_flood_is_sampled_within_the_budget_and_the_report_says_so(tmp_path):
    session = _capture(tmp_path)
    try:
        traces = _flood(1.2)
    finally:
        session.request_stop()
        assert session.wait(5)
    report = checked({"ok": True, "report": session.report()})["report"]  # the host accepts its shape
    c = report["parts"]["spans"]["counts"]
    assert c["spans_seen"] == 2 * traces
    fraction = c["spans_keep_fraction"]
    assert fraction < 1 and c["spans_keep_history"][0][1] == 1.0 and c["spans_keep_history"][-1][1] == fraction
    # the first review comes FIRST_DRAIN_S in, not a drain period: a backlog kept whole had built by then
    first_fall_s = (c["spans_keep_history"][1][0] - c["spans_keep_history"][0][0]) / 1e9
    assert first_fall_s < capture_mod.DRAIN_PERIOD_S, c["spans_keep_history"]
    assert c["spans_cpu_budget_pct"] == 100 * spanbudget.SPAN_CPU_SHARE
    assert c["spans_cpu_pct"] <= 2.5 * c["spans_cpu_budget_pct"], c  # the first backlog included
    records = [json.loads(ln) for ln in (tmp_path / SPANS.name).read_text().splitlines()]
    in_sample = [r for r in records if spanbudget.hex_kept(r["trace_id"], fraction)]
    assert c["spans_kept"] == len(in_sample) > 0
    assert 0.6 <= c["spans_kept"] / (fraction * c["spans_seen"]) <= 1.4, c  # a fair sample of what ended
    by_trace: dict[str, int] = defaultdict(int)
    for r in in_sample:
        by_trace[r["trace_id"]] += 1
    assert set(by_trace.values()) == {2}  # whole traces
    assert c["spans_sampled_out"] + len(records) + c["spans_dropped"] == c["spans_seen"]


def test_stop_converts_for_a_bounded_time_then_discards_the_rest_as_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_mod, "DRAIN_PERIOD_S", 60.0)  # nothing converted while it captures
    monkeypatch.setattr(capture_mod, "STOP_DRAIN_S", 0.1)
    monkeypatch.setattr(spanbudget, "SPAN_CPU_SHARE", 100.0)  # no sampling: the queue is all to convert
    session = _capture(tmp_path)
    try:
        traces = _flood(0.8)
    finally:
        t0 = time.monotonic()
        session.request_stop()
        assert session.wait(5)
    took = time.monotonic() - t0
    assert took < 0.1 + 0.6, took  # the drain's bound and the writer's close, not the whole queue
    c = session.report()["parts"]["spans"]["counts"]
    assert c["spans_keep_fraction"] == 1.0 and c["spans_sampled_out"] == 0
    assert c["spans_discarded_at_stop"] > 0 and c["spans_dropped"] == c["spans_discarded_at_stop"]
    assert c["spans"] + c["spans_discarded_at_stop"] == c["spans_seen"] == 2 * traces
    [(lo, hi)] = c["spans_dropped_ranges_ns"]  # the discarded ones ended last: one stretch at the end
    assert c["spans_last_end_ns"] <= lo + 10**6 and hi <= c["spans_window_ns"][1]


class _CountedYields:
    """The capture module's ``time`` with its ``sleep`` calls (the GIL yields) counted."""

    def __init__(self) -> None:
        self.yields = 0
        self.slept: set[float] = set()

    def sleep(self, s: float) -> None:
        self.yields += 1
        self.slept.add(s)
        time.sleep(s)

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_spans_the_fraction_left_out_are_filtered_without_a_yield_per_batch(tmp_path, monkeypatch):
    """Against a target running Python flat out each yield costs a 5 ms switch interval: yielding after
    every batch taken moved ~13k spans/s, and at 32k spans/s the stop discarded ~5k of them. A yield
    comes once per GIL_HOLD_S of the capture thread's CPU, whatever the batches held."""
    session = CaptureSession(1, CaptureRequest(tmp_path, 30.0, torch=False, gc=False), tmp_path, None)
    span_hooks.HOOKS.sink = session._sink
    try:
        _traces(_provider(seed=3), 4000)  # 12,000 spans queued under the first fraction (1.0) ...
    finally:
        span_hooks.HOOKS.sink = None
    session._span_budget.fraction = MIN_KEEP_FRACTION  # ... which has since fallen
    queued = len(session._sink.finished)
    counted = _CountedYields()
    monkeypatch.setattr(capture_mod, "time", counted)
    cpu0 = time.thread_time()
    session._drain_spans(session._writer.stream(SPANS.name), 60.0)
    cpu_s = time.thread_time() - cpu0
    session._writer.close()
    assert not session._sink.finished and session._sink.taken == queued == 12_000
    assert counted.yields <= cpu_s / capture_mod.GIL_HOLD_S, (counted.yields, cpu_s)
    assert counted.yields < queued / capture_mod.BATCH_SPANS  # not one per batch
    # a yield sleeps: a serving loop, giving the GIL up at each system call, would hand it straight back
    assert counted.slept == {capture_mod.YIELD_S} and capture_mod.YIELD_S > capture_mod.GIL_HOLD_S


def test_a_drain_writes_its_spans_in_few_writes_not_one_per_batch(tmp_path, monkeypatch):
    """Each write's system call gives the GIL up, one more handoff for the capture thread to win
    back: a drain writes once per WRITE_SPANS records, and every converted span reaches the stream."""
    monkeypatch.setattr(spanbudget, "SPAN_CPU_SHARE", 100.0)  # no sampling: every span converted
    session = CaptureSession(1, CaptureRequest(tmp_path, 30.0, torch=False, gc=False), tmp_path, None)
    span_hooks.HOOKS.sink = session._sink
    try:
        _traces(_provider(seed=5), 1000)  # 3,000 spans: 47 batches of 64
    finally:
        span_hooks.HOOKS.sink = None
    stream = session._writer.stream(SPANS.name)
    writes: list[int] = []
    real = stream.write_many
    monkeypatch.setattr(stream, "write_many", lambda records: (writes.append(len(records)), real(records)))
    session._drain_spans(stream, 60.0)
    session._writer.close()
    assert sum(writes) == session._span_counts.spans == 3000
    assert len(writes) <= 3000 // capture_mod.WRITE_SPANS + 1 < 3000 // capture_mod.BATCH_SPANS  # not one per batch
    lines = (tmp_path / SPANS.name).read_text().splitlines()
    assert len(lines) == 3000 and json.loads(lines[-1])["source"] == "agent"

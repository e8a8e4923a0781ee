"""Issue 24: the agent's span hook on the application's threads. A queued ReadableSpan kept ten
GC-tracked objects alive until the capture thread took it; they reached the oldest generation and
brought full collections of the target's heap (0.1 s each with torch imported). A kept span is now
an entry of plain values, a sampled-out one costs a compare, and an idle bridge takes no lock.
Real OpenTelemetry SDK spans, in process (a private TracerProvider)."""
from __future__ import annotations

import gc

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from diagnose.agent.inproc import spans as span_hooks
from diagnose.agent.inproc.bridge import Bridge
from diagnose.agent.inproc.records import MAX_STRING_CHARS
from diagnose.agent.inproc.spanbudget import KEEP_ALL


def _provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(span_hooks.new_processor())
    return provider


def _one_request(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("POST /predict", kind=SpanKind.SERVER,
                                      attributes={"http.request.method": "POST", "rows": 8}) as root:
        with tracer.start_as_current_span("model.forward", attributes={"dims": (8, 256), "long": "x" * 5000}) as sp:
            sp.add_event("first_token", {"index": 0})
        root.set_status(Status(StatusCode.ERROR))


class _NoLock:
    def __enter__(self):
        raise AssertionError("the bridge took its lock for a span it does not mirror")

    def __exit__(self, *exc):
        return False


def test_a_kept_span_is_queued_as_plain_values_that_the_collector_stops_tracking():
    sink = span_hooks.SpanSink()
    span_hooks.HOOKS.sink = sink
    try:
        _one_request(_provider())
    finally:
        span_hooks.HOOKS.sink = None
    entries = sink.take_finished()
    assert len(entries) == 2 and not sink.open
    records = {r["name"]: r for r in (span_hooks.entry_record(e) for e in entries)}
    gc.collect()
    # the server span (scalar attributes, no event) is not tracked once the collector looked at it: it
    # is not promoted while queued; a sequence value and an event nest (one collection a level)
    root_entry, child_entry = sorted(entries, key=lambda e: e[span_hooks.PARENT_ID] is not None)
    assert not gc.is_tracked(root_entry) and gc.is_tracked(child_entry)
    for _ in range(3):  # entry -> events -> event -> its attributes
        gc.collect()
    assert not gc.is_tracked(child_entry)
    root, child = records["POST /predict"], records["model.forward"]
    assert root["kind"] == "server" and root["status"] == "error" and root["parent_span_id"] is None
    assert root["attributes"] == {"http.request.method": "POST", "rows": 8} and root["source"] == "agent"
    assert child["parent_span_id"] == root["span_id"] and child["trace_id"] == root["trace_id"]
    assert child["kind"] == "internal" and child["status"] == "unset"
    assert child["attributes"]["dims"] == [8, 256] and len(child["attributes"]["long"]) == MAX_STRING_CHARS + 1
    assert [(e["name"], e["attributes"]) for e in child["events"]] == [("first_token", {"index": 0})]
    assert child["start_ns"] <= child["end_ns"] and root["start_ns"] <= child["start_ns"]


def test_span_record_of_a_readable_span_is_the_record_of_its_entry():
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(span_hooks.new_processor())
    sink = span_hooks.SpanSink()
    span_hooks.HOOKS.sink = sink
    try:
        _one_request(provider)
    finally:
        span_hooks.HOOKS.sink = None
    by_id = {r["span_id"]: r for r in (span_hooks.entry_record(e) for e in sink.take_finished())}
    for readable in exporter.get_finished_spans():
        record = span_hooks.span_record(readable)
        assert record == by_id[record["span_id"]] and record["service"] == "svc"


def test_spans_of_traces_left_out_are_counted_and_nothing_is_kept():
    sink = span_hooks.SpanSink()
    sink.bound = 0  # head sampling keeps no trace
    span_hooks.HOOKS.sink = sink
    try:
        for _ in range(50):
            _one_request(_provider())
    finally:
        span_hooks.HOOKS.sink = None
    assert sink.sampled_out == 100 and not sink.finished and not sink.open and sink.seen == 100


def test_the_hooks_read_the_sdk_span_context_fields_they_assume():
    """The hooks read ``span._context`` and index the SpanContext (spans.py): pinned to this SDK."""
    span = TracerProvider().get_tracer("test").start_span("s")
    span.end()
    ctx = span.context
    assert span._context is ctx and (ctx[0], ctx[1]) == (ctx.trace_id, ctx.span_id) != (0, 0)


class _ForeignSpan:
    """A span of another type: ``context`` only (the hooks fall back to the property)."""

    def __init__(self, real, context=None):
        self._real, self.context = real, context if context is not None else real.context

    def __getattr__(self, name):
        if name == "_context":
            raise AttributeError(name)
        return getattr(self._real, name)


def test_a_span_without_the_sdk_field_is_read_through_its_property_and_a_broken_one_is_counted():
    tracer = TracerProvider().get_tracer("test")
    sink = span_hooks.SpanSink()
    sink.bound = KEEP_ALL
    good, broken = tracer.start_span("good"), tracer.start_span("broken")
    good.end(), broken.end()
    for span in (_ForeignSpan(good), _ForeignSpan(broken, context=("not", "ids"))):
        sink.started(span)
        sink.ended(span)
    [entry] = sink.take_finished()
    assert entry[span_hooks.NAME] == "good" and entry[span_hooks.SPAN_ID] == good.context.span_id
    assert (sink.unreadable_starts, sink.unreadable) == (1, 1) and not sink.open


def test_an_idle_bridge_is_never_called_and_takes_no_lock():
    bridge = Bridge(None)
    bridge._lock = _NoLock()
    span_hooks.HOOKS.bridge, span_hooks.HOOKS.sink = bridge, span_hooks.SpanSink()
    try:
        _one_request(_provider())
        assert not bridge.active and not bridge.open
        bridge.torch_on = True  # a torch window runs: mirrored (torch is not imported here: nothing opens)
        assert bridge.active
        bridge.torch_on = False
        assert not bridge.active
    finally:
        span_hooks.HOOKS.bridge, span_hooks.HOOKS.sink = None, None


def test_open_spans_at_the_end_are_entries_without_an_end_time():
    sink = span_hooks.SpanSink()
    sink.bound = KEEP_ALL
    span_hooks.HOOKS.sink = sink
    tracer = _provider().get_tracer("test")
    span = tracer.start_span("stuck", attributes={"a": 1})
    try:
        [entry] = span_hooks.split_kept(sink.take_open(), KEEP_ALL)[0]
    finally:
        span_hooks.HOOKS.sink = None
        span.end()
    record = span_hooks.entry_record(entry[1])
    assert record["name"] == "stuck" and record["end_ns"] is None and record["attributes"] == {"a": 1}


def test_the_torch_counts_say_what_share_of_the_capture_was_profiled(tmp_path):
    from diagnose.agent.inproc.capture import CaptureRequest, CaptureSession
    from diagnose.agent.inproc.windowplan import DUTY_SHARE, WindowStats

    session = CaptureSession(1, CaptureRequest(tmp_path, 20.0, torch_window_s=10.0), tmp_path, None)
    session._started_at -= 10.0  # ten seconds into the capture
    session._torch_windows = [WindowStats(0.002, 20, 0.001, 0.001), WindowStats(0.198, 2000, 0.01, 0.01)]
    counts = session._torch_counts()
    assert counts["torch_duty_budget_pct"] == 100 * DUTY_SHARE
    assert counts["torch_profiled_budget_s"] == DUTY_SHARE * 20.0  # not the 10 s asked for
    assert counts["torch_profiled_share_pct"] == pytest.approx(2.0, abs=0.05)  # 0.2 s of 10 s
    session._writer.close()


def test_spans_are_mirrored_while_a_torch_window_runs_and_forgotten_after():
    torch = pytest.importorskip("torch")
    bridge = Bridge(None)
    span_hooks.HOOKS.bridge = bridge
    tracer = _provider().get_tracer("test")
    try:
        bridge.torch_on = True
        with torch.autograd.profiler.profile(use_kineto=True) as prof:
            with tracer.start_as_current_span("stage"):
                assert len(bridge.open) == 1  # mirrored as a record_function range
                held = tracer.start_span("held")  # still open when the window stops
            bridge.close_torch_ranges()
        assert not bridge.active and list(bridge.open) == []  # the window's ranges ended with it
        held.end()  # its exit finds nothing to close: no lock, no error
        assert "stage" in {e.key for e in prof.key_averages()}
    finally:
        span_hooks.HOOKS.bridge = None


def test_the_processor_hands_spans_straight_to_the_sink_only_while_nothing_is_mirrored():
    """spans.rebind: during a capture with an idle bridge the SDK calls the sink's own methods (one
    Python call a hook, half the capture's hook cost in benchmarks/agent_hook_cost.py); a torch
    window's mirror, an NVTX bridge or the capture's end puts the processor's methods back, and
    every span still lands in the sink."""
    provider = _provider()
    processor = span_hooks._processors[-1]
    sink = span_hooks.SpanSink()
    sink.bound = KEEP_ALL
    bridge = Bridge(None)
    span_hooks.HOOKS.bridge = bridge
    try:
        assert "on_end" not in vars(processor)  # no capture: the class's methods
        span_hooks.HOOKS.sink = sink
        assert processor.on_start == sink.started and processor.on_end == sink.ended
        _one_request(provider)
        bridge.torch_on = True  # a torch window runs: spans are mirrored, through the class's methods
        assert "on_start" not in vars(processor) and "on_end" not in vars(processor)
        _one_request(provider)
        bridge.torch_on = False
        assert processor.on_end == sink.ended
        _one_request(provider)
        span_hooks.HOOKS.bridge = Bridge(object())  # NVTX: every span is mirrored
        assert "on_end" not in vars(processor)
    finally:
        span_hooks.HOOKS.sink = None
        span_hooks.HOOKS.bridge = None
    assert "on_start" not in vars(processor) and "on_end" not in vars(processor)
    assert len(sink.finished) == 6 and not sink.open and sink.seen == 6

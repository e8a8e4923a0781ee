"""OpenTelemetry spans from inside the target: a SpanProcessor on the global TracerProvider.

The processor is added once to the provider the application configured, whenever the agent first
finds it (at agent start, at each capture start, while a capture runs, and, with NVTX mirroring
on, right after the application calls ``set_tracer_provider``: providerwatch.py). It is never
removed (the SDK has no way to), so it costs two attribute reads per span while no capture runs.

Threading contract: ``on_start``/``on_end`` run on the application's threads, in its hot path. They
never raise and never do I/O, and their cost does not depend on the span: a capture's sink reads the
span's trace id, compares it with the keep bound (spanbudget.py: spans of traces the sampler does
not keep are counted and left there) and appends the finished ``ReadableSpan`` itself to a bounded
deque (full -> counted as dropped). Nothing is converted there: the capture thread converts and
writes the queued spans in small batches. opentelemetry is never imported unless the application
imported it.
"""
from __future__ import annotations

import functools
import importlib.util
import itertools
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from diagnose.agent.inproc.records import MAX_ATTRIBUTES, MAX_EVENTS, SpanRejected, bound_events, make_record
from diagnose.agent.inproc.spanbudget import KEEP_ALL, KEY_MASK

MAX_QUEUED_SPANS = 100_000
MAX_OPEN_SPANS = 10_000
MAX_DROP_RANGES = 32  # beyond it the last range grows over the spans kept in between (conservative)
# The hooks read the SDK's ReadableSpan field behind ``span.context`` (a span without it: the
# property) and the SpanContext as the tuple it is, (trace_id, span_id, ...): 7 and 15 ns against
# 35 and 71 ns for the property and the named field, a third of a sampled-out hook
# (benchmarks/agent_hook_cost.py); tests/agent/test_span_hot_path.py pins both to the SDK's layout.
# what reading a span of another type (or one changing under a reader) raises: counted, never raised
# into the application's span.end()
_UNREADABLE = (AttributeError, TypeError, ValueError, RuntimeError, IndexError)


class SpanSink:
    """Spans of one capture: finished ones queued (as entries, see ``compact``), open ones tracked
    for the end of the window.

    ``bound``: a span is queued only when its trace's key is below it (spanbudget.py; the capture
    thread lowers it, the hook only reads it); the others are counted in ``sampled_out`` and cost
    nothing more: the decision comes before any copy. A span ending while the queue is full is
    dropped and counted; ``drop_ranges`` holds the [first, last] end time (Unix ns) of each run of
    drops, so the analysis knows which stretches of the window its spans do not cover
    (diagnose/signals/spans/coverage.py). Counters are plain ints bumped under the GIL (no switch
    point inside ``+=`` on CPython 3.10+); ``taken`` is the capture thread's. No lock: every
    shared write is one dict, deque or attribute operation."""

    def __init__(self) -> None:
        self.finished: deque = deque()
        self.open: dict[int, Any] = {}
        self.bound = KEEP_ALL
        self.dropped = 0
        self.sampled_out = 0
        self.unreadable = 0  # spans ending without the SDK's context (never seen from the SDK's provider)
        self.unreadable_starts = 0
        self.taken = 0
        self.drop_ranges: list[list[int]] = []
        self._dropping = False
        self._service: tuple[Any, Any] = (None, None)  # (resource, its service.name): one tuple, swapped whole

    def started(self, span: Any, parent_context: Any = None) -> None:
        """Hot path (the application's thread; the processor's ``on_start`` while nothing is
        mirrored, see ``rebind``). Keyed by span id: the SDK hands ``on_end`` a new ReadableSpan,
        not the object ``on_start`` got. Only spans of kept traces are tracked."""
        try:
            try:
                ctx = span._context  # the SDK's field: see the note above _UNREADABLE
            except AttributeError:
                ctx = span.context
            if ctx[0] & KEY_MASK < self.bound and len(self.open) < MAX_OPEN_SPANS:
                self.open[ctx[1]] = span
        except _UNREADABLE:
            self.unreadable_starts += 1

    def ended(self, span: Any) -> None:
        """Hot path (the application's thread; the processor's ``on_end`` while nothing is
        mirrored): O(1), never raises. A kept span is copied into an entry of plain values
        (``compact``): the ReadableSpan and its ten GC-tracked parts die here."""
        try:
            try:
                ctx = span._context
            except AttributeError:
                ctx = span.context
            if self.open:
                self.open.pop(ctx[1], None)
            if ctx[0] & KEY_MASK >= self.bound:
                self.sampled_out += 1
                return
            if len(self.finished) >= MAX_QUEUED_SPANS:
                self.dropped += 1
                self._note_drop(getattr(span, "end_time", None))
                return
            entry = compact(span, ctx, self._service_of(span))
        except _UNREADABLE:
            self.unreadable += 1
            return
        self.finished.append(entry)
        self._dropping = False

    def _service_of(self, span: Any) -> Any:
        """The span's ``service.name``, looked up once per resource (a provider has one)."""
        resource = getattr(span, "resource", None)
        cached = self._service
        if cached[0] is not resource:
            cached = (resource, _service_name(resource))
            self._service = cached
        return cached[1]

    @property
    def seen(self) -> int:
        """Spans ended in the target since the capture began, kept or not (approximate while
        spans end: the counters are read one after the other)."""
        return self.taken + len(self.finished) + self.sampled_out + self.dropped + self.unreadable

    def _note_drop(self, end_ns: Any) -> None:
        """Extend the current run of drops, or start one (hot path: no I/O, never raises)."""
        if type(end_ns) is not int:
            return
        ranges = self.drop_ranges
        if ranges and (self._dropping or len(ranges) >= MAX_DROP_RANGES):
            ranges[-1][1] = max(ranges[-1][1], end_ns)
        else:
            ranges.append([end_ns, end_ns])
        self._dropping = True

    def take(self, limit: int) -> list[tuple]:
        """At most ``limit`` queued entries, oldest first (the capture thread)."""
        out: list[tuple] = []
        queue = self.finished
        for _ in range(min(limit, len(queue))):
            out.append(queue.popleft())
        self.taken += len(out)
        return out

    def take_finished(self) -> list[tuple]:
        return self.take(len(self.finished))

    def discard_queued(self) -> int:
        """Drop what is still queued, as dropped spans with their end times' range (the capture
        ended and its bounded drain is over). Returns how many."""
        n = 0
        self._dropping = False
        while self.finished:
            entry = self.finished.popleft()
            n += 1
            self._note_drop(entry[END])
        self.dropped += n
        self._dropping = False
        return n

    def take_open(self) -> list[tuple]:
        """Entries of the spans still open (no end time), and forget them all."""
        spans, self.open = list(self.open.values()), {}
        out = []
        for span in spans:
            try:
                if span.end_time is None:  # still open: its attributes may change under us
                    out.append(compact(span, span.context, self._service_of(span)))
            except _UNREADABLE:
                self.unreadable_starts += 1
        return out


# An entry: the fields of one span the record needs, as one flat tuple of plain values (ints, strings;
# the attributes inline as key, value, key, value, ... from ATTRIBUTES on), so that the collector's
# first look at it stops tracking it: it untracks a tuple only when nothing in it may be tracked, and
# a nested tuple is looked at after its holder (one collection per level, meanwhile promoted). A
# queued ReadableSpan kept ten tracked objects alive until the capture thread took it: they
# survived into the oldest generation, and at ~10 spans/ms brought a full collection of the
# target's heap (0.1 s with torch imported) every few hundred ms (benchmarks/agent_hook_cost.py).
# Events (rare) and sequence values stay nested.
TRACE_ID, SPAN_ID, PARENT_ID, NAME, KIND, START, END, STATUS, SERVICE, EVENTS, ATTRIBUTES = range(11)


def compact(span: Any, ctx: Any, service: Any) -> tuple:
    """``span`` (the SDK's ReadableSpan or Span) -> an entry. Raises AttributeError or TypeError
    for a foreign span type."""
    parent = span.parent
    kind, status = span.kind, span.status
    return (ctx.trace_id, ctx.span_id, parent.span_id if parent is not None else None, span.name,
            getattr(kind, "_name_", kind), span.start_time, span.end_time,
            getattr(status.status_code, "_name_", "UNSET") if status is not None else "UNSET",
            service, _event_items(span), *_attribute_items(span))


def _flat_items(mapping: Any) -> Any:
    """A mapping's first MAX_ATTRIBUTES items as key, value, key, value, ... (nothing for None)."""
    if not mapping:
        return ()
    items = mapping.items() if len(mapping) <= MAX_ATTRIBUTES else itertools.islice(mapping.items(), MAX_ATTRIBUTES)
    return itertools.chain.from_iterable(items)


def _attribute_items(span: Any) -> Any:
    # the SDK's BoundedAttributes keeps a plain dict: read in C, where the public mapping proxy
    # goes item by item through Python (2.3 vs 0.3 us for two attributes)
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    return _flat_items(inner if type(inner) is dict else span.attributes)


def _event_items(span: Any) -> tuple:
    raw = getattr(span, "_events", None)
    if raw is not None and not raw:  # the SDK's BoundedList, empty: the common case
        return ()
    events = span.events
    if not events:
        return ()
    return tuple((e.name, e.timestamp, tuple(_flat_items(e.attributes))) for e in tuple(events)[:MAX_EVENTS])


def _service_name(resource: Any) -> Any:
    attributes = getattr(resource, "attributes", None)
    return attributes.get("service.name") if attributes is not None else None


def _pairs(flat: Any) -> dict[str, Any]:
    it = iter(flat)
    return dict(zip(it, it))


def entry_record(entry: tuple) -> dict[str, Any]:
    """An entry -> SPANS record. Raises SpanRejected."""
    return make_record(
        trace_id=entry[TRACE_ID], span_id=entry[SPAN_ID], parent_span_id=entry[PARENT_ID], name=entry[NAME],
        kind=entry[KIND], start_ns=entry[START], end_ns=entry[END], status=entry[STATUS],
        attributes=_pairs(entry[ATTRIBUTES:]), events=bound_events((n, t, _pairs(a)) for n, t, a in entry[EVENTS]),
        service=entry[SERVICE], source="agent",
    )


class SpanHooks:
    """What the processor forwards to: the running capture's sink and the NVTX/torch bridge.
    Plain attributes, read on every span; setting either (or the bridge turning its torch mirror
    on or off) rebinds the processors."""

    sink: SpanSink | None
    bridge: Any  # diagnose.agent.inproc.bridge.Bridge

    def __init__(self) -> None:
        object.__setattr__(self, "sink", None)
        object.__setattr__(self, "bridge", None)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "bridge" and value is not None:
            value.on_change = rebind
        rebind()


HOOKS = SpanHooks()
_attached: list[Any] = []  # providers our processor was added to (kept referenced: compared by identity)
_processors: list[Any] = []  # our processor on each of them
_attach_lock = threading.Lock()


def rebind() -> None:
    """While a capture runs and nothing is mirrored, the SDK calls the sink's own methods: the
    processor's ``on_start``/``on_end`` are set on each of our processors to ``sink.started`` and
    ``sink.ended``, one Python call a span start or end instead of two plus the lookups of HOOKS
    (measured by benchmarks/agent_hook_cost.py). Otherwise the class's methods, which check the
    bridge, run. A span already inside the previous method finishes there: the same as a span that
    read HOOKS just before it changed."""
    sink, bridge = HOOKS.sink, HOOKS.bridge
    mirrored = bridge is not None and (bridge.active or bridge.open)
    for processor in list(_processors):
        if sink is not None and not mirrored:
            processor.on_start, processor.on_end = sink.started, sink.ended
        else:
            vars(processor).pop("on_start", None)
            vars(processor).pop("on_end", None)


@functools.lru_cache(maxsize=1)
def _processor_class() -> type:
    from opentelemetry.sdk.trace import SpanProcessor

    class DiagnoseSpanProcessor(SpanProcessor):
        """Forwards spans to the running capture (if any) and the bridge (if on); never raises."""

        def on_start(self, span, parent_context=None) -> None:
            sink, bridge = HOOKS.sink, HOOKS.bridge
            if sink is not None:
                sink.started(span)
            if bridge is not None and bridge.active:
                bridge.enter(span)

        def on_end(self, span) -> None:
            sink, bridge = HOOKS.sink, HOOKS.bridge
            if bridge is not None and bridge.open:
                bridge.exit(span)
            if sink is not None:
                sink.ended(span)

    return DiagnoseSpanProcessor


def attach() -> str | None:
    """Add the processor to the application's global TracerProvider.

    Returns None when attached (now or earlier), else why spans cannot be recorded.
    """
    if "opentelemetry.trace" not in sys.modules:
        if importlib.util.find_spec("opentelemetry") is None:
            return "opentelemetry is not installed in the target's environment"
        return "the target has not imported opentelemetry (no tracing configured)"
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return ("the target has no TracerProvider (opentelemetry.trace.set_tracer_provider was never "
                "called): configure opentelemetry-sdk's TracerProvider in the service")
    if not hasattr(provider, "add_span_processor"):
        return (f"the target's TracerProvider is {type(provider).__name__}, which records nothing: "
                "use opentelemetry-sdk's TracerProvider")
    if getattr(provider, "_disabled", False):
        return "OTEL_SDK_DISABLED is set in the target: its TracerProvider records nothing"
    with _attach_lock:
        if any(p is provider for p in _attached):
            return None
        try:
            provider.add_span_processor(new_processor())
        except (ImportError, TypeError, AttributeError) as exc:
            return f"cannot add a span processor to {type(provider).__name__}: {exc}"
        _attached.append(provider)
    return None


def new_processor() -> Any:
    """Our SpanProcessor, bound as ``rebind`` says. Raises ImportError without opentelemetry-sdk."""
    processor = _processor_class()()
    _processors.append(processor)
    rebind()
    return processor


def is_attached() -> bool:
    """True when our processor is on the current global TracerProvider (no side effects)."""
    module = sys.modules.get("opentelemetry.trace")
    if module is None:
        return False
    provider = module.get_tracer_provider()
    return any(p is provider for p in _attached)


def span_record(span: Any) -> dict[str, Any]:
    """ReadableSpan (opentelemetry-sdk) -> SPANS record. Raises SpanRejected, or AttributeError or
    TypeError for a foreign span type."""
    return entry_record(compact(span, span.context, _service_name(getattr(span, "resource", None))))


def trace_id_of(entry: tuple) -> int:
    return entry[TRACE_ID]


def split_kept(entries: list[tuple], bound: int) -> tuple[list[tuple[int, tuple]], int]:
    """``(trace key, entry)`` of the entries whose trace key is below ``bound`` (spanbudget.py),
    and how many it left out (queued under a higher fraction: never converted)."""
    kept: list[tuple[int, tuple]] = []
    left_out = 0
    for entry in entries:
        key = entry[TRACE_ID] & KEY_MASK
        if key < bound:
            kept.append((key, entry))
        else:
            left_out += 1
    return kept, left_out


def convert(entries: list[tuple[int, tuple]], on_record: Callable[[dict[str, Any], int], None],
            on_reject: Callable[[str], None]) -> None:
    """``on_record(record, key)`` for each ``(key, entry)``; ``on_reject(counter key)`` for an
    entry that cannot be a record."""
    for key, entry in entries:
        try:
            record = entry_record(entry)
        except SpanRejected as exc:
            on_reject(exc.args[0])
            continue
        except (AttributeError, TypeError, ValueError) as exc:  # values of a foreign span type
            on_reject(f"unreadable:{type(exc).__name__}")
            continue
        on_record(record, key)

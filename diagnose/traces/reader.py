"""read_trace(path) -> KinetoTrace: a torch profiler (Kineto) Chrome trace as numpy columns.

Streams the file: gzip is inflated 1 MiB at a time (zlib, so a truncated file yields everything
before the cut); inside the events array each chunk is cut at its last ``}, {`` and decoded into
typed structs by msgspec (typed.py; orjson dicts where the structs do not fit), which only accept
the cut if it falls between events; the numpy structural scanner
(scan.py) handles the document's head and tail and any chunk the guess fails on. Only the columns
the analyzers read are kept (columns.py, store.py). Events orjson rejects (invalid UTF-8, control
characters in names, bare ``inf``/``NaN``, integers beyond 64 bits) are re-parsed one by one by a
tolerant path and counted. Peak memory: a few chunks plus the columns (~60-90 bytes per kept
event), independent of the document's object graph; a single event is held whole.

Timestamps: Kineto writes µs floats (ns resolution in the fraction); with ``baseTimeNanoseconds``
the Unix time is ``baseTimeNanoseconds + ts·1000``, without it ``ts`` is already Unix µs.
"""
from __future__ import annotations

import errno
import io
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import numpy as np
import orjson

from diagnose.bundle.files import file_kind
from diagnose.traces.columns import ColumnBuilder, as_int
from diagnose.traces.devices import DeviceProps, device_props
from diagnose.traces.scan import KEY_WINDOW, ScanState, max_depth, scan
from diagnose.traces.schema import Table
from diagnose.traces.tolerant import Damage, Tally, events_in, next_event, parse_batch, parse_tolerant

if TYPE_CHECKING:
    from _typeshed import SupportsRead

CHUNK_BYTES = 1 << 20
WHOLE_DOC_BYTES = 4 << 20  # a document this small is parsed in one call (fixed costs dominate)
MAX_EVENT_BYTES = 64 << 20  # one event longer than this ends the read (a real event is < 1 MiB)
RESYNC_BYTES = 1 << 20  # the next event after a broken one opens within this (a real event is < 1 MiB)
_GZIP_MAGIC = b"\x1f\x8b"
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
MIN_UNIX_US = 1e14  # ~1973: smaller timestamps without a base time are not on the Unix clock
MIN_PLAUSIBLE_NS = 946_684_800 * 10**9  # 2000-01-01: a base time or a trace's placement before
MAX_PLAUSIBLE_NS = 4_102_444_800 * 10**9  # 2100-01-01 (or after) is not a Unix time in ns
MAX_TS_US = MAX_PLAUSIBLE_NS / 1000  # |ts| beyond this (µs) is no time on any clock a trace may use
MAX_META_DEPTH = 64  # a cut-off metadata skeleton nested deeper is not read key by key


def plausible_ns(value: Any) -> bool:
    """Whether ``value`` is an int (not a bool) Unix time in ns between 2000 and 2100."""
    return type(value) is int and MIN_PLAUSIBLE_NS <= value < MAX_PLAUSIBLE_NS


def base_time_ns(value: Any) -> int | None:
    """A document's ``baseTimeNanoseconds`` when it is a plausible Unix time in ns, else None."""
    return value if plausible_ns(value) else None


class TraceReadError(Exception):
    """The file cannot be read at all (missing, unreadable, not JSON)."""


@dataclass(frozen=True)
class TraceMeta:
    """Trace-level facts from the document's metadata (``distributedInfo``, ``deviceProperties``)."""

    rank: int | None
    world_size: int | None
    schema_version: int | None
    base_time_ns: int | None
    devices: tuple[str, ...]
    backend: str | None
    unix_clock: bool  # False when timestamps could not be placed on the Unix clock
    device_props: tuple[DeviceProps, ...] = ()  # the same devices with the facts that identify a model


class BatchSink(Protocol):
    """Takes the parsed events of a trace one batch (about CHUNK_BYTES of JSON) at a time."""

    def add_batch(self, events: list[Any]) -> None: ...


@dataclass(frozen=True)
class EventStream:
    """What streaming a trace found besides its events (see ``stream_events``)."""

    metadata: dict[str, Any]  # the document minus its events (its first 16 MiB, see scan.py)
    events_seen: bool  # False: no traceEvents array (not a Chrome/Kineto trace)
    bytes_read: int  # decompressed bytes up to the last complete event or the document's end
    truncated_at_byte: int | None
    error: str | None
    unparsable: int  # events not even the tolerant parser could read (dropped)
    ignored_after: int = 0  # non-blank bytes after the document's root value (a second document)
    damage: Damage = Damage()  # where the dropped events were, backslashes repaired


@dataclass(frozen=True)
class ReadReport:
    """How reading went: counts, repairs, and where a truncated file stopped."""

    bytes_read: int
    events: int
    kept: int
    flows: int
    invalid: int
    skipped: int
    repaired: int
    unparsable: int
    truncated_at_byte: int | None
    error: str | None
    metadata_dropped_bytes: int = 0
    ignored_after: int = 0  # non-blank bytes after the document's root value (a second document)
    damage: Damage = Damage()  # where the dropped events were, backslashes repaired

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "damage": self.damage.to_json()}


@dataclass(frozen=True)
class KinetoTrace:
    """A trace as columns, sorted by start: ``gpu`` (kernels, memcpy, memset, stream syncs),
    ``runtime`` (cuda*/hip* host calls), ``cpu`` (torch ops and record_function labels). Times
    are Unix ns (``start_ns``, ``dur_ns``, ``end_ns``); flows have ``t_ns``."""

    path: str
    meta: TraceMeta
    report: ReadReport
    names: tuple[str, ...]
    gpu: Table
    runtime: Table
    cpu: Table
    flows: Table
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)


def inflate_chunks(fh: SupportsRead[bytes], gz: bool) -> Iterator[bytes]:
    """Decompressed chunks of at most CHUNK_BYTES. Raises EOFError at a truncated gzip stream,
    zlib.error at a corrupt one."""
    if not gz:
        while True:
            data = fh.read(CHUNK_BYTES)
            if not data:
                return
            yield data
    d = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, auto-detected
    while True:
        raw = d.unconsumed_tail or fh.read(1 << 18)
        if not raw:
            break
        out = d.decompress(raw, CHUNK_BYTES)
        if out:
            yield out
        if d.eof:
            rest = d.unused_data
            if not rest.lstrip(b"\0"):
                return
            d = zlib.decompressobj(47)  # a further gzip member
            out = d.decompress(rest, CHUNK_BYTES)
            if out:
                yield out
    if not d.eof:
        raise EOFError("gzip stream ended before its end marker (file truncated)")


def _last_boundary(buf: bytes) -> int:
    """Index of the ``}`` of the last ``}, {`` in ``buf`` (a likely boundary between events), or -1."""
    for window in (1 << 16, len(buf)):
        last = None
        for last in _BOUNDARY.finditer(buf, max(0, len(buf) - window)):  # noqa: B007 - keeps the last match
            pass
        if last is not None:
            return last.start()
        if window >= len(buf):
            break
    return -1


def _fast_batch(buf: bytes, builder: BatchSink) -> bytes | None:
    """Add the events of ``buf`` (which starts at an event) up to its last boundary to
    ``builder``; return the rest of ``buf``.

    The cut is only a guess; it is exact when the parser accepts ``[buf[:cut + 1]]``: a cut inside
    a string or a nested object leaves the text unbalanced and invalid. A sink that decodes typed
    events (ColumnBuilder.add_json_array) is tried first, orjson dicts next. None: nothing was
    added; use the exact scan.
    """
    cut = _last_boundary(buf)
    if cut < 0:
        return None
    body = b"[" + buf[:cut + 1] + b"]"
    add_typed = getattr(builder, "add_json_array", None)
    if add_typed is None or not add_typed(body):
        try:
            events = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        builder.add_batch(events)
    rest = buf[cut + 1:].lstrip()
    return rest[1:] if rest[:1] == b"," else rest


def _stream_events(chunks: Iterable[bytes], builder: BatchSink, st: ScanState,
                   tally: Tally) -> tuple[int | None, str | None]:
    """Feed every complete event to ``builder``. Returns (truncated_at_byte, error).

    Inside the events array each buffer is first tried with a guessed cut (``_fast_batch``); the
    numpy structural scan handles the document's head and tail and any buffer the guess fails on.
    An event longer than MAX_EVENT_BYTES stops the read there (memory stays bounded on a hostile
    or broken file, e.g. a gzip bomb that is one endless string).
    """
    carry = b""
    error = None
    try:
        for data in chunks:
            carry = _consume(carry + data, builder, st, tally, final=False)
            if len(carry) > MAX_EVENT_BYTES:
                return st.offset, f"an event longer than {MAX_EVENT_BYTES >> 20} MiB (not read further)"
        if carry:
            carry = _consume(carry, builder, st, tally, final=True)
    except EOFError as exc:
        error = str(exc)
        carry = _consume(carry, builder, st, tally, final=True) if carry else carry
    except zlib.error as exc:
        error = f"corrupt compressed data: {exc}"
    truncated = None
    if carry.strip() or st.depth > 0 or st.in_string or error:
        truncated = st.offset
        error = error or "the JSON document ends before its last event is complete (file truncated)"
    return truncated, error


def _consume(buf: bytes, builder: BatchSink, st: ScanState, tally: Tally, final: bool) -> bytes:
    """Parse what ``buf`` completes; return the bytes to carry into the next buffer.

    An event no parser reads is suspect: a broken key's stray quote makes the scanner misread
    every later byte. So is an event still open after RESYNC_BYTES, at the end of the stream, or
    when the root value (as scanned) closes around it. The scan goes back to where it opens and
    restarts at the next readable event (tolerant.next_event); only the bytes between are lost
    (counted in ``tally``). Without such an event within RESYNC_BYTES the scan's view stands.
    """
    while True:
        at_event = st.in_events and st.depth == st.events_depth and not st.in_string
        if at_event and not final:
            rest = _fast_batch(buf, builder)
            if rest is not None:
                st.offset += len(buf) - len(rest)
                return rest
        held = 0 if final else len(buf) - len(buf.rstrip(b"\\"))  # never cut inside a backslash run
        if held == len(buf):
            return buf
        mark = st.mark()
        batch, carry = scan(buf[:len(buf) - held], st)
        carry += buf[len(buf) - held:]
        events, bad = parse_batch(batch, tally, mark.state.offset)
        while True:
            suspect = batch.open_at is not None and (final or st.done or len(carry) > RESYNC_BYTES)
            bad_at = int(batch.starts[bad]) if bad is not None else batch.open_at if suspect else None
            if bad_at is None:
                builder.add_batch(events)
                return carry
            resume = next_event(buf, bad_at, RESYNC_BYTES)
            if resume is not None or not (final or len(buf) - bad_at > RESYNC_BYTES):
                break  # restart at ``resume``, or wait for the bytes that decide
            if bad is None:  # an open event and no event after it: the file ends inside it
                builder.add_batch(events)
                return carry
            tally.dropped(mark.state.offset + bad_at)  # the scan's view stands
            more, bad = parse_batch(batch, tally, mark.state.offset, bad + 1)
            events += more
        builder.add_batch(events)
        st.restore(mark)
        scan(buf[:bad_at], st)  # the state where the broken event opens: between two events
        if resume is None:
            return buf[bad_at:]
        tally.dropped(mark.state.offset + bad_at, events_in(buf[bad_at:resume]))
        tally.resynced += 1
        st.offset += resume - bad_at
        st.tail = buf[max(0, resume - KEY_WINDOW):resume]
        buf = buf[resume:]


def _metadata(skeleton: bytes) -> dict[str, Any]:
    """Parse the document minus its events; a cut-off skeleton yields its complete keys."""
    if not skeleton.strip():
        return {}
    try:
        doc = orjson.loads(skeleton)
        return doc if isinstance(doc, dict) else {}
    except orjson.JSONDecodeError:
        pass
    doc = parse_tolerant(skeleton)
    if isinstance(doc, dict):
        return doc
    if max_depth(skeleton) > MAX_META_DEPTH:  # ijson's cost grows with depth squared
        return {}
    import ijson  # only for cut-off documents: yields the root keys that are complete

    out: dict[str, Any] = {}
    try:
        for key, value in ijson.kvitems(io.BytesIO(skeleton), "", use_float=True):
            out[key] = value
    except (ijson.JSONError, ValueError):
        pass
    return out


def _meta(doc: dict[str, Any], base_override: int | None, first_ts_us: float | None) -> TraceMeta:
    info = doc.get("distributedInfo")
    dist: dict[str, Any] = info if isinstance(info, dict) else {}
    rank = as_int(dist.get("rank"), -1) if "rank" in dist else -1
    ws = as_int(dist.get("world_size"), -1)
    base = base_time_ns(doc.get("baseTimeNanoseconds"))
    base = base if base is not None else base_time_ns(base_override)
    props = device_props(doc.get("deviceProperties"))
    devices = tuple(d.name for d in props)
    unix = base is not None or (first_ts_us is not None and first_ts_us >= MIN_UNIX_US)
    sv = doc.get("schemaVersion")
    return TraceMeta(rank if rank >= 0 else None, ws if ws > 0 else None,
                     sv if type(sv) is int else None, base, devices,
                     dist.get("backend") if isinstance(dist.get("backend"), str) else None, unix, props)


def _in_range(table: Table, tally: Tally) -> Table:
    """The rows whose ts (and ts + dur) no clock could hold (|t| > MAX_TS_US, past year 2100 even
    as Unix µs) dropped and counted: in ns they would overflow int64 and wreck every span."""
    if not len(table):
        return table
    ts = table["ts"]
    ok = np.abs(ts) <= MAX_TS_US
    if "dur" in table.columns:
        ok &= np.abs(ts + table["dur"]) <= MAX_TS_US
    if ok.all():
        return table
    tally.out_of_range += int(len(ok) - ok.sum())
    return table.take(ok)


def _to_ns(table: Table, base_ns: int) -> Table:
    """Replace µs float columns by int64 Unix ns (start_ns, dur_ns, end_ns; flows: t_ns), rows
    sorted by start. Works column by column to keep peak memory near the table's size."""
    cols = table.columns
    ts = cols.pop("ts")
    whole = np.floor(ts)  # split: Unix µs (~1.7e15) times 1000 would not fit a double exactly
    ts -= whole
    ts *= 1000.0
    start = whole.astype(np.int64)
    del whole
    start *= 1000
    start += np.rint(ts).astype(np.int64)
    start += base_ns
    del ts
    order = np.argsort(start, kind="stable")
    if "dur" in cols:
        dur = np.rint(cols.pop("dur") * 1000.0).astype(np.int64)
        cols.update(start_ns=start, dur_ns=dur, end_ns=start + dur)
    else:
        cols["t_ns"] = start
    for k in list(cols):
        cols[k] = cols[k][order]
    return Table(cols)


def _head(chunks: Iterator[bytes]) -> tuple[list[bytes], Iterator[bytes] | None, Exception | None]:
    """The first chunks, up to WHOLE_DOC_BYTES: (chunks, the rest or None at the end, the
    EOFError/zlib.error that ended them early)."""
    head: list[bytes] = []
    size = 0
    try:
        for data in chunks:
            head.append(data)
            size += len(data)
            if size > WHOLE_DOC_BYTES:
                return head, chunks, None
    except (EOFError, zlib.error) as exc:
        return head, None, exc
    return head, None, None


def _replay(head: list[bytes], rest: Iterator[bytes] | None, failure: Exception | None) -> Iterator[bytes]:
    yield from head
    if failure is not None:
        raise failure
    if rest is not None:
        yield from rest


def _whole_document(head: list[bytes], builder: ColumnBuilder) -> dict[str, Any] | None:
    """A small, strictly valid trace parsed in one orjson call (no structural scan); None when
    it is not one (odd content, no events array): the streaming path then reads it."""
    data = b"".join(head)
    if data.count(b'"traceEvents"') != 1:  # a key twice: orjson keeps the last, streaming reads both
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return None
    builder.add_batch(doc.pop("traceEvents"))
    return doc


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading: no symlink at its last component, never blocking (a FIFO),
    a regular file by fstat of the opened descriptor. Raises TraceReadError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        why = "a symlink (not followed)" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise TraceReadError(f"cannot open {path}: {why}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TraceReadError(f"cannot open {path}: {file_kind(mode)}, not a regular file")
    return os.fdopen(fd, "rb")


def read_trace(path: Path | str, base_time_ns: int | None = None, fh: BinaryIO | None = None) -> KinetoTrace:
    """Read a Kineto/Chrome trace (``.json`` or gzipped, detected by content).

    ``base_time_ns``: the clock base from the bundle's TORCH index record when the trace has none.
    ``fh``: the file already open (e.g. by descriptor below a bundle; it is read from its start
    and not closed), else ``path`` is opened (regular files only, no symlink as its last part).
    Raises TraceReadError when the file cannot be opened or holds no JSON document at all; a
    truncated or partly malformed file is read as far as it goes (see ``report``).
    """
    path = Path(path)
    builder, st = ColumnBuilder(), ScanState()
    tally = Tally()
    with nullcontext(fh) if fh is not None else _open_regular(path) as fh:
        gz = fh.read(2) == _GZIP_MAGIC
        fh.seek(0)
        chunks = inflate_chunks(fh, gz)
        head, rest, failure = _head(chunks)
        doc = _whole_document(head, builder) if rest is None and failure is None else None
        if doc is None:
            truncated, error = _stream_events(_replay(head, rest, failure), builder, st, tally)
        else:
            truncated, error, st.offset = None, None, sum(map(len, head))
    if doc is None:
        if st.root is None:
            raise TraceReadError(f"{path} holds no JSON document" + (f" ({error})" if error else ""))
        doc = _metadata(bytes(st.skeleton))
        if not st.events_seen:
            error = error or "no traceEvents array: not a Chrome/Kineto trace"
    parts, flows = builder.partitions(), builder.flows()
    parts = {k: _in_range(t, tally) for k, t in parts.items()}
    kept_out = tally.out_of_range
    flows = _in_range(flows, tally)
    flows_out = tally.out_of_range - kept_out
    firsts = [float(t["ts"].min()) for t in parts.values() if len(t)]
    meta = _meta(doc, base_time_ns, min(firsts) if firsts else None)
    base = meta.base_time_ns or 0
    c = builder.counts
    report = ReadReport(st.offset, c["events"], c["kept"] - kept_out, c["flows"] - flows_out,
                        c["invalid"] + tally.out_of_range, c["skipped"],
                        tally.repaired, tally.unparsable, truncated, error, st.skeleton_dropped,
                        st.ignored_after, tally.damage())
    return KinetoTrace(str(path), meta, report, builder.name_table(), _to_ns(parts["gpu"], base),
                       _to_ns(parts["runtime"], base), _to_ns(parts["cpu"], base), _to_ns(flows, base),
                       builder.thread_names, builder.process_names)


def stream_events(chunks: Iterable[bytes], sink: BatchSink) -> EventStream:
    """Feed every complete event of a trace, given as decompressed byte ``chunks`` (e.g. from
    ``inflate_chunks``), to ``sink`` batch by batch, without building columns: a light pass for
    callers that need a few facts per trace. Memory: a few chunks plus the sink's state.

    A truncated document yields the events before the cut (``truncated_at_byte``). Raises
    TraceReadError when the chunks hold no JSON document; exceptions raised by ``chunks`` other
    than EOFError and zlib.error (which become ``error``) propagate.
    """
    st, tally = ScanState(), Tally()
    truncated, error = _stream_events(chunks, sink, st, tally)
    if st.root is None:
        raise TraceReadError("no JSON document" + (f" ({error})" if error else ""))
    return EventStream(_metadata(bytes(st.skeleton)), st.events_seen, st.offset, truncated, error,
                       tally.unparsable, st.ignored_after, tally.damage())


__all__ = ["BatchSink", "EventStream", "KinetoTrace", "ReadReport", "TraceMeta", "TraceReadError",
           "inflate_chunks", "parse_tolerant", "read_trace", "stream_events"]

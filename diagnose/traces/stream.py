"""The events of a Kineto/Chrome trace as a stream of bytes: gzip inflated 1 MiB at a time (zlib, so a
truncated file yields everything before the cut); inside the events array each chunk is cut at its
last ``}, {`` and handed to a sink (columns.py's ColumnBuilder decodes typed structs, typed.py; orjson
dicts where they do not fit), which only accepts the cut if it falls between events; the numpy
structural scanner (scan.py) handles the document's head and tail and any chunk the guess fails on.
Events orjson rejects (invalid UTF-8, control characters in names, bare ``inf``/``NaN``, integers
beyond 64 bits) are re-parsed one by one by a tolerant path (tolerant.py) and counted. Memory: a
few chunks, whatever the document's size; a single event is held whole.
"""
from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from diagnose.traces.scan import KEY_WINDOW, ScanState, max_depth, scan
from diagnose.traces.tolerant import Damage, Tally, events_in, next_event, parse_batch, parse_tolerant

if TYPE_CHECKING:
    from _typeshed import SupportsRead

CHUNK_BYTES = 1 << 20
MAX_EVENT_BYTES = 64 << 20  # one event longer than this ends the read (a real event is < 1 MiB)
RESYNC_BYTES = 1 << 20  # the next event after a broken one opens within this (a real event is < 1 MiB)
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
MAX_META_DEPTH = 64  # a cut-off metadata skeleton nested deeper is not read key by key


class TraceReadError(Exception):
    """The file cannot be read at all (missing, unreadable, not JSON)."""


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


def feed_events(chunks: Iterable[bytes], builder: BatchSink, st: ScanState,
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


def skeleton_metadata(skeleton: bytes) -> dict[str, Any]:
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


def stream_events(chunks: Iterable[bytes], sink: BatchSink) -> EventStream:
    """Feed every complete event of a trace, given as decompressed byte ``chunks`` (e.g. from
    ``inflate_chunks``), to ``sink`` batch by batch, without building columns: a light pass for
    callers that need a few facts per trace. Memory: a few chunks plus the sink's state.

    A truncated document yields the events before the cut (``truncated_at_byte``). Raises
    TraceReadError when the chunks hold no JSON document; exceptions raised by ``chunks`` other
    than EOFError and zlib.error (which become ``error``) propagate.
    """
    st, tally = ScanState(), Tally()
    truncated, error = feed_events(chunks, sink, st, tally)
    if st.root is None:
        raise TraceReadError("no JSON document" + (f" ({error})" if error else ""))
    return EventStream(skeleton_metadata(bytes(st.skeleton)), st.events_seen, st.offset, truncated, error,
                       tally.unparsable, st.ignored_after, tally.damage())


__all__ = ["BatchSink", "EventStream", "TraceReadError", "feed_events", "inflate_chunks", "skeleton_metadata",
           "stream_events"]

"""Structural scanner: cut a Chrome-trace JSON byte stream into event texts without parsing it.

A Kineto trace is one JSON object whose ``traceEvents`` array holds every event (or, in the plain
Chrome format, a bare array of events). Parsing the whole document builds a Python object graph
many times the file's size; instead each decompressed chunk is scanned with numpy for its
structural bytes (quotes, brackets) to find where each event object starts and ends, and only
complete events are handed on, one chunk at a time, to a real JSON parser (orjson). Bytes outside
the events array (the trace's metadata) are kept as a small "skeleton" document parsed at the end.

Memory is bounded by the chunk size plus the largest single event.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace

import numpy as np

_QUOTE = ord('"')
_BACKSLASH = ord("\\")
_DELTA = np.zeros(256, np.int8)
_DELTA[[ord("{"), ord("[")]] = 1
_DELTA[[ord("}"), ord("]")]] = -1
_STRUCTURAL = _DELTA != 0
_KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')
EVENTS_KEY = b"traceEvents"
MAX_SKELETON_BYTES = 16 << 20  # metadata beyond this is dropped (and counted)
KEY_WINDOW = 512  # bytes kept from the previous buffer to find the key of a root-level value


@dataclass
class ScanState:
    """Scanner state carried from one buffer to the next."""

    offset: int = 0  # stream offset of the current buffer's first byte
    depth: int = 0
    in_string: bool = False
    root: int | None = None  # ord('{') or ord('[') once the document starts
    in_events: bool = False
    events_seen: bool = False
    tail: bytes = b""  # last bytes before the buffer, to find root-level keys
    skeleton: bytearray = field(default_factory=bytearray)
    skeleton_dropped: int = 0
    done: bool = False  # the root value has closed: anything after it is not read
    ignored_after: int = 0  # non-blank bytes after the root value (e.g. a second document)

    @property
    def events_depth(self) -> int:
        """Depth inside the events array (before an event's opening brace)."""
        return 1 if self.root == ord("[") else 2

    def mark(self) -> ScanMark:
        """The state now, to return to with ``restore`` (the skeleton is kept by its length)."""
        return ScanMark(replace(self, skeleton=bytearray()), len(self.skeleton))

    def restore(self, mark: ScanMark) -> None:
        """Return to ``mark``: what was scanned since is forgotten (its skeleton bytes too)."""
        for f in fields(self):
            if f.name != "skeleton":
                setattr(self, f.name, getattr(mark.state, f.name))
        del self.skeleton[mark.skeleton_bytes:]


@dataclass(frozen=True)
class ScanMark:
    """A ScanState as it was (see ``ScanState.mark``)."""

    state: ScanState
    skeleton_bytes: int


@dataclass(frozen=True)
class Batch:
    """Complete events of one buffer: ``buf[starts[i]:ends[i] + 1]`` is event i."""

    buf: bytes
    starts: np.ndarray
    ends: np.ndarray
    edges: tuple[bytes, ...] = ()  # array text before the first / after the last event of each region
    open_at: int | None = None  # where the event that continues past ``buf`` opens (the carry's start)

    def body(self) -> bytes:
        """The events as a JSON array text (separators between events are commas/whitespace)."""
        if not len(self.starts):
            return b"[]"
        return b"[" + self.buf[int(self.starts[0]):int(self.ends[-1]) + 1] + b"]"

    def event(self, i: int) -> bytes:
        return self.buf[int(self.starts[i]):int(self.ends[i]) + 1]


def _real_quotes(b: np.ndarray) -> np.ndarray:
    """Positions of quote bytes that are not escaped by an odd run of backslashes."""
    quotes = np.flatnonzero(b == _QUOTE)
    if not len(quotes):
        return quotes
    maybe = quotes[(quotes > 0) & (b[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
    if not len(maybe):
        return quotes
    escaped = []
    for q in maybe.tolist():  # rare: only quotes right after a backslash
        run, i = 0, q - 1
        while i >= 0 and b[i] == _BACKSLASH:
            run, i = run + 1, i - 1
        if run % 2:
            escaped.append(q)
    return np.setdiff1d(quotes, np.asarray(escaped, np.int64), assume_unique=True) if escaped else quotes


def scan(buf: bytes, st: ScanState) -> tuple[Batch, bytes]:
    """Scan ``buf`` (which never ends inside a backslash run unless final) and advance ``st``.

    Returns the complete events and the bytes to prepend to the next buffer (an event that
    started but did not end in ``buf``). Once the root value closes, the rest of the stream (a
    second document back to back) is skipped and its non-blank bytes counted in ``ignored_after``.
    """
    if st.done:
        st.ignored_after += len(buf.strip())
        st.offset += len(buf)
        return Batch(buf, np.zeros(0, np.int64), np.zeros(0, np.int64)), b""
    b = np.frombuffer(buf, np.uint8)
    quotes = _real_quotes(b)
    pos = np.flatnonzero(_STRUCTURAL[b])
    inside = (np.searchsorted(quotes, pos) + int(st.in_string)) % 2 == 1
    pos = pos[~inside]
    delta = _DELTA[b[pos]].astype(np.int64)
    after = st.depth + np.cumsum(delta)
    before = after - delta
    if st.root is None and len(pos):
        st.root = int(b[pos[0]])
        st.in_events = st.root == ord("[")
        st.events_seen = st.in_events
    closed = np.flatnonzero(after <= 0) if st.root is not None else np.zeros(0, np.int64)
    if len(closed):  # the root value ends in this buffer: scan up to its end, skip the rest
        end = int(pos[closed[0]]) + 1
        if end < len(buf):
            batch, carry = scan(buf[:end], st)
            st.done = True
            scan(buf[end:], st)
            return batch, carry
        st.done = True
    regions = _event_regions(buf, pos, delta, before, after, st)
    _keep_skeleton(buf, regions, st)
    ed = st.events_depth
    is_start = (delta > 0) & (before == ed) & (b[pos] == ord("{"))
    is_end = (delta < 0) & (after == ed) & (b[pos] == ord("}"))
    in_region = _mask_regions(pos, regions)
    starts, ends = pos[is_start & in_region], pos[is_end & in_region]
    carry, cut = b"", None
    if len(starts) > len(ends):  # the last event continues in the next buffer
        cut = int(starts[len(ends)])
        carry = buf[cut:]
        starts = starts[:len(ends)]
        st.depth, st.in_string = ed, False
    else:
        st.depth = int(after[-1]) if len(after) else st.depth
        st.in_string = (len(quotes) + int(st.in_string)) % 2 == 1
    st.offset += len(buf) - len(carry)
    st.tail = buf[max(0, len(buf) - len(carry) - KEY_WINDOW):len(buf) - len(carry)]
    return Batch(buf, starts, ends, _edges(buf, regions, starts, ends, len(buf) - len(carry)), cut), carry


def _edges(buf: bytes, regions: list[tuple[int, int]], starts: np.ndarray, ends: np.ndarray,
           limit: int) -> tuple[bytes, ...]:
    """The array text of each region outside its first..last complete event (where elements
    that are not objects would go unseen), up to ``limit`` (the start of a carried event)."""
    out = []
    for lo, hi in regions:
        hi = min(hi, limit)
        if hi <= lo:
            continue
        a, z = np.searchsorted(starts, lo), np.searchsorted(ends, hi)
        if a < z:
            out += [buf[lo:int(starts[a])], buf[int(ends[z - 1]) + 1:hi]]
        else:
            out.append(buf[lo:hi])
    return tuple(e for e in out if e.strip(b" \t\r\n,"))


def _event_regions(buf: bytes, pos: np.ndarray, delta: np.ndarray, before: np.ndarray,
                   after: np.ndarray, st: ScanState) -> list[tuple[int, int]]:
    """Byte ranges of ``buf`` inside the events array: [first content byte, closing bracket)."""
    if st.root == ord("["):
        close = np.flatnonzero((delta < 0) & (after == 0))
        end = int(pos[close[0]]) if len(close) else len(buf)
        if len(close):
            st.in_events = False
        return [(0, end)]
    regions: list[tuple[int, int]] = []
    start = 0 if st.in_events else None
    root_level = np.flatnonzero(((delta > 0) & (before == 1)) | ((delta < 0) & (after == 1)))
    for i in root_level.tolist():
        p = int(pos[i])
        if delta[i] > 0:
            window = (st.tail + buf[:p])[-KEY_WINDOW:] if p < KEY_WINDOW else buf[p - KEY_WINDOW:p]
            m = _KEY_BEFORE.search(window)
            if m and m.group(1) == EVENTS_KEY and buf[p] == ord("["):
                start, st.in_events, st.events_seen = p + 1, True, True
        elif st.in_events:
            regions.append((start or 0, p))
            start, st.in_events = None, False
    if st.in_events:
        regions.append((start or 0, len(buf)))
    return regions


def _mask_regions(pos: np.ndarray, regions: list[tuple[int, int]]) -> np.ndarray:
    mask = np.zeros(len(pos), bool)
    for lo, hi in regions:
        mask[np.searchsorted(pos, lo):np.searchsorted(pos, hi)] = True
    return mask


def _keep_skeleton(buf: bytes, regions: list[tuple[int, int]], st: ScanState) -> None:
    """Append the bytes outside the events array to the metadata skeleton (bounded)."""
    if st.root != ord("{"):
        return
    lo = 0
    pieces = []
    for a, b in regions:
        pieces.append(buf[lo:a])
        lo = b
    pieces.append(buf[lo:])
    for piece in pieces:
        room = MAX_SKELETON_BYTES - len(st.skeleton)
        st.skeleton += piece[:max(0, room)]
        st.skeleton_dropped += max(0, len(piece) - max(0, room))


def _structure(buf: bytes, in_string: bool = False) -> tuple[np.ndarray, np.ndarray, bool]:
    """(positions, +1/-1 deltas) of the brackets of ``buf`` outside strings, and whether ``buf``
    ends inside a string (``in_string``: whether it starts inside one)."""
    b = np.frombuffer(buf, np.uint8)
    quotes = _real_quotes(b)
    pos = np.flatnonzero(_STRUCTURAL[b])
    pos = pos[(np.searchsorted(quotes, pos) + int(in_string)) % 2 == 0]
    return pos, _DELTA[b[pos]].astype(np.int64), (len(quotes) + int(in_string)) % 2 == 1


def object_end(buf: bytes, at: int, first_window: int = 1 << 10) -> int | None:
    """Index in ``buf`` of the bracket that closes the value opening at ``buf[at]`` (outside any
    string), or None when it does not close within ``buf``. Windows grow 16x from
    ``first_window`` bytes, so the cost follows the value's size, not the buffer's."""
    window = first_window
    while True:
        pos, delta, _ = _structure(buf[at:at + window])
        closed = np.flatnonzero(np.cumsum(delta) <= 0)
        if len(closed):
            return at + int(pos[closed[0]])
        if at + window >= len(buf):
            return None
        window *= 16


def max_depth(buf: bytes) -> int:
    """How deeply the JSON text ``buf`` nests (brackets inside strings do not count)."""
    _, delta, _ = _structure(buf)
    return int(np.cumsum(delta).max()) if len(delta) else 0


class DocumentSizes:
    """Fed a JSON text chunk by chunk (one document, JSON Lines, documents back to back), tracks
    the longest top-level value in bytes and how many there are, in bounded memory."""

    def __init__(self) -> None:
        self.offset = 0
        self.depth = 0
        self.in_string = False
        self.start: int | None = None  # offset where the open top-level value began
        self.documents = 0
        self.longest = 0
        self.held = b""  # a trailing backslash run, so an escaped quote is never cut from its escape

    def feed(self, data: bytes) -> None:
        data = self.held + data
        keep = len(data) - len(data.rstrip(b"\\"))
        data, self.held = data[:len(data) - keep], data[len(data) - keep:]
        pos, delta, self.in_string = _structure(data, self.in_string)
        if len(delta):
            after = self.depth + np.cumsum(delta)
            before = after - delta
            for i in np.flatnonzero((before <= 0) & (delta > 0) | (after <= 0) & (delta < 0)).tolist():
                at = self.offset + int(pos[i])
                if delta[i] > 0:
                    self.start = at
                    self.documents += 1
                elif self.start is not None:
                    self.longest = max(self.longest, at + 1 - self.start)
                    self.start = None
            self.depth = max(0, int(after[-1]))
        self.offset += len(data)

    def open_bytes(self) -> int:
        """Bytes of the top-level value still open (0 when none is)."""
        return self.offset + len(self.held) - self.start if self.start is not None else 0


__all__ = ["Batch", "DocumentSizes", "ScanMark", "ScanState", "max_depth", "object_end", "scan"]

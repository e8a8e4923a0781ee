"""Taking an OTLP/HTTP request body in, within bounds that hold for all requests together.

Every body held in memory (as received, and inflated) is charged to one ``ByteBudget`` shared by
all handler threads before its bytes are read: when the budget is spent the request is refused with
503 and ``Retry-After`` instead of waiting, so N concurrent clients cost at most the budget, never
N bodies. The Content-Length must be ASCII digits (``str.isdigit`` also accepts "²" or "١"), the
body must arrive within ``BODY_DEADLINE_S``, and gzip/deflate is inflated in steps, each step's
output charged to the budget before it is produced.

Every refusal is a ``Refused`` carrying the HTTP status, a one-line message and the counter it
goes to; nothing else escapes these functions except OSError from the client's socket.
"""
from __future__ import annotations

import threading
import time
import zlib
from typing import Any

BODY_DEADLINE_S = 30.0  # a whole body, however it trickles (each read also has the socket timeout)
READ_STEP = 64 * 1024
INFLATE_STEP = 1024 * 1024
MAX_DISCARD_BYTES = 64 * 1024 * 1024  # a refused body is read and dropped up to this much
RETRY_AFTER_S = 1


class Refused(Exception):
    """A request answered without decoding it: ``status`` (HTTP), one-line ``message``,
    ``counter`` (the receiver's count it adds to) and ``retry_after_s`` for 503."""

    def __init__(self, status: int, message: str, counter: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.status, self.message, self.counter, self.retry_after_s = status, message, counter, retry_after_s


class ByteBudget:
    """Bytes of request bodies all handlers together may hold. Thread-safe; never blocks."""

    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = capacity_bytes
        self._used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Reserve ``n`` bytes; False (nothing reserved) when that would pass the capacity."""
        with self._lock:
            if self._used + n > self.capacity_bytes:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used -= n

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return self._used


class Lease:
    """What one request holds of a ByteBudget; ``release`` returns all of it (idempotent)."""

    def __init__(self, budget: ByteBudget):
        self._budget = budget
        self.held = 0

    def take(self, n: int) -> bool:
        if not self._budget.take(n):
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        n = min(n, self.held)
        self.held -= n
        self._budget.give(n)

    def release(self) -> None:
        self.give(self.held)


def busy(what: str) -> Refused:
    return Refused(503, f"the receiver holds its limit of bodies in memory ({what}); retry later",
                   "rejected_busy", RETRY_AFTER_S)


def content_length(value: str | None, max_bytes: int) -> int:
    """The Content-Length header -> bytes. Raises Refused: 411 absent, 400 not ASCII digits,
    413 over ``max_bytes``."""
    if value is None:
        raise Refused(411, "Content-Length required (chunked bodies are not accepted)", "rejected_unsupported")
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise Refused(400, f"Content-Length {value[:40]!r} is not a byte count", "rejected_malformed")
    if len(text) > 18 or int(text) > max_bytes:  # 18 digits: int() of any length is never reached
        raise Refused(413, f"body of {text[:40]} bytes exceeds the {max_bytes}-byte limit", "rejected_too_large")
    return int(text)


def read_body(rfile: Any, length: int, deadline_s: float | None = None) -> bytearray:
    """Exactly ``length`` bytes from ``rfile`` (a buffered socket reader), one socket read per step.

    Raises Refused 400 when the client stops short, 408 past ``deadline_s`` (default
    BODY_DEADLINE_S); OSError (timeout,
    reset) from the socket is turned into 408/400 as well.
    """
    deadline_s = BODY_DEADLINE_S if deadline_s is None else deadline_s
    buf = bytearray(length)
    view, got = memoryview(buf), 0
    deadline = time.monotonic() + deadline_s
    try:
        while got < length:
            if time.monotonic() > deadline:
                raise Refused(408, f"body not received within {deadline_s:g} s ({got} of {length} bytes)",
                              "rejected_timeout")
            n = rfile.readinto1(view[got:got + READ_STEP])
            if not n:
                raise Refused(400, f"body ended after {got} of {length} bytes", "rejected_malformed")
            got += n
    except TimeoutError:
        raise Refused(408, f"body stalled after {got} of {length} bytes", "rejected_timeout") from None
    except OSError as exc:
        raise Refused(400, f"body lost after {got} of {length} bytes: {exc.strerror or exc}",
                      "rejected_malformed") from None
    finally:
        view.release()
    return buf


def discard(rfile: Any, length: int, cap: int = MAX_DISCARD_BYTES) -> None:
    """Read and drop a refused body (up to ``cap``) so the client reads our answer, not a reset."""
    left = min(length, cap)
    deadline = time.monotonic() + BODY_DEADLINE_S
    try:
        while left > 0 and time.monotonic() < deadline:
            chunk = rfile.read1(min(left, READ_STEP))
            if not chunk:
                return
            left -= len(chunk)
    except OSError:  # the client gave up; the status line may still reach it
        return


def inflate(raw: bytearray, encoding: str | None, max_bytes: int, lease: Lease) -> bytearray:
    """The body without its Content-Encoding (identity, gzip or deflate), at most ``max_bytes``.

    Each step's output is charged to ``lease`` before it is produced. Raises Refused: 415 unknown
    encoding, 400 corrupt or truncated stream, 413 over ``max_bytes``, 503 budget spent.
    """
    enc = (encoding or "identity").strip().lower()
    if enc == "identity":
        return raw
    if enc not in ("gzip", "deflate"):
        raise Refused(415, f"unsupported Content-Encoding {enc[:40]!r}; send gzip, deflate or none",
                      "rejected_unsupported")
    d = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, auto-detected
    out = bytearray()
    try:
        with memoryview(raw) as view:
            for start in range(0, len(raw), INFLATE_STEP):
                _inflate_step(d, view[start:start + INFLATE_STEP], out, max_bytes, lease)
                if d.eof:
                    break
        while not d.eof and _inflate_step(d, b"", out, max_bytes, lease):
            pass  # output zlib still holds after the last input
    except zlib.error as exc:
        raise Refused(400, f"cannot decompress the {enc} body: {exc}", "rejected_malformed") from None
    if not d.eof:
        raise Refused(400, f"the {enc} body ends before its end marker (truncated)", "rejected_malformed")
    return out


def _inflate_step(d: Any, data: Any, out: bytearray, max_bytes: int, lease: Lease) -> bool:
    """Inflate all of ``data`` into ``out``; True when anything came out."""
    produced = False
    while True:
        step = min(INFLATE_STEP, max_bytes + 1 - len(out))  # >= 1: zlib reads 0 as "no limit"
        if not lease.take(step):
            raise busy("while inflating")
        piece = d.decompress(data, step)
        lease.give(step - len(piece))
        out += piece
        produced = produced or bool(piece)
        if len(out) > max_bytes:
            raise Refused(413, f"body inflates beyond the {max_bytes}-byte limit", "rejected_too_large")
        data = d.unconsumed_tail
        if not data or d.eof:
            return produced

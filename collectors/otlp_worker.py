"""Decoding OTLP bodies in a child process whose memory is capped, so no body can cost root more.

Why a child: what decoding costs is not bounded by the body's size in any useful way. 8 MiB of
protobuf holding empty spans (two bytes each) is 4 million messages, about 700 MB once decoded;
8 MiB of JSON ``{},{},...`` is about 200 MB of Python objects. The child (``python -m
diagnose.collectors.otlp_child``, started in ``/`` so that root's working directory, which may be
anyone's, is not on its sys.path) sets ``RLIMIT_DATA`` to ``memory_bytes`` after its imports; a
body that needs more is answered 413 and the child goes on (upb and json fail cleanly), or is
restarted if it died. It decodes one body at a time and keeps at most ``max_spans`` resource, scope
and span entries of each (cut spans are counted as ``over_request_cap``), so the records waiting
to be written are bounded too.

Pipe frames, both ways: one kind byte, a 4-byte big-endian length, the payload.
Parent -> child: ``P`` (protobuf body) or ``J`` (JSON body). Child -> parent: any number of ``R``
(JSON Lines of SPANS records, about RECORDS_CHUNK_BYTES each), then ``D`` (JSON: the request's
span counts and ``over_cap``) or ``E`` (JSON: ``status`` 400/413 and a one-line ``message``).
"""
from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

DECODER_MEMORY_BYTES = 384 * 1024 * 1024  # the child's RLIMIT_DATA (its interpreter and imports: ~15 MB)
DECODE_TIMEOUT_S = 20.0  # one body, decode and records; a child past it is killed and restarted
RECORDS_CHUNK_BYTES = 1024 * 1024
MAX_FRAME_BYTES = 64 * 1024 * 1024  # what the parent reads of one child frame
HEAD = struct.Struct("!cI")  # frame: kind byte, payload length

Records = Callable[[list[dict[str, Any]]], None]


class Undecodable(Exception):
    """The body is not an OTLP trace request (status 400) or needs more memory than the decoder
    may use (413); the message is one line."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class DecoderDown(Exception):
    """The decoding child could not be started, died or overran DECODE_TIMEOUT_S (answer 503)."""


@dataclass(frozen=True)
class Decoded:
    """What one body gave: ``counts`` (SpanCounts.to_json() of its spans) and ``over_cap``
    (spans past ``max_spans``, not decoded)."""

    counts: dict[str, Any]
    over_cap: int


class Decoder:
    """The parent's side: one child, one body at a time (callers queue on a lock).

    ``decode`` hands each chunk of records to ``on_records`` (while the lock is held, so the
    records of two bodies never interleave). Thread-safe; ``close`` may be called from any thread,
    also during a decode. ``failure`` is the last reason the child failed (its last stderr line
    when it exited), for the collector's status.
    """

    def __init__(self, max_spans: int, memory_bytes: int = DECODER_MEMORY_BYTES,
                 timeout_s: float = DECODE_TIMEOUT_S):
        self.max_spans, self.memory_bytes, self.timeout_s = max_spans, memory_bytes, timeout_s
        self.restarts = 0
        self.failure: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None  # the child's stderr: an unlinked temporary file
        self._lock = threading.Lock()  # one decode at a time
        self._state = threading.Lock()  # _proc and _closed, never held for long
        self._closed = False

    def start(self) -> None:
        """Start the child now (it is also started on demand). Raises DecoderDown."""
        with self._lock:
            self._ensure()

    def decode(self, body: bytes | bytearray, is_json: bool, on_records: Records) -> Decoded:
        """Raises Undecodable (the body's fault) or DecoderDown (the decoder's)."""
        with self._lock:
            proc = self._ensure()
            deadline = time.monotonic() + self.timeout_s
            try:
                _send(proc, b"J" if is_json else b"P", body)
                for kind, payload in _frames(proc, deadline):
                    if kind == b"R":
                        on_records(_records(payload))
                        continue
                    doc = json.loads(payload)
                    if kind == b"E":
                        raise Undecodable(int(doc["status"]), str(doc["message"]))
                    return Decoded(dict(doc["counts"]), int(doc["over_cap"]))
                raise DecoderDown(f"the OTLP decoder exited ({self._last_words()})")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self._fail(f"the OTLP decoder failed: {exc}")
            except DecoderDown as exc:
                self._fail(str(exc))
        raise AssertionError("unreachable")  # _fail raises

    def close(self) -> None:
        """End the child now; a decode in progress gets DecoderDown."""
        with self._state:
            self._closed = True
            proc = self._proc
        if proc is not None:
            proc.kill()
            _end(proc)
        if self._stderr is not None:
            self._stderr.close()

    def _ensure(self) -> subprocess.Popen[bytes]:
        with self._state:
            if self._closed:
                raise DecoderDown("the capture has ended")
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
            if self._proc is not None:
                self.restarts += 1
                _end(self._proc)
            # cwd "/": ``-m`` puts the working directory first on sys.path, and root's may be anyone's
            argv = [sys.executable, "-m", "diagnose.collectors.otlp_child", str(self.memory_bytes),
                    str(self.max_spans)]
            try:
                self._stderr = tempfile.TemporaryFile()
                self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=self._stderr, cwd="/")
            except OSError as exc:
                self.failure = f"cannot start the OTLP decoder ({sys.executable}): {exc.strerror or exc}"
                raise DecoderDown(self.failure) from None
            return self._proc

    def _fail(self, why: str) -> None:
        with self._state:
            proc, self._proc = self._proc, None
            closed = self._closed
        if proc is not None:
            proc.kill()
            _end(proc)
        if closed:
            raise DecoderDown("the capture has ended")
        self.restarts += 1
        self.failure = why
        raise DecoderDown(why)

    def _last_words(self) -> str:
        """The child's last stderr line (a traceback's last line says why it died)."""
        try:
            self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, self._stderr.tell() - 2048))
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError, AttributeError):
            return "no stderr"
        return lines[-1][:200] if lines else "it wrote nothing on stderr"


def _end(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()  # EOF on stdin ends the child's loop
            except OSError:
                pass
    try:
        proc.wait(2.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(2.0)


def _send(proc: subprocess.Popen[bytes], kind: bytes, body: bytes | bytearray) -> None:
    assert proc.stdin is not None
    proc.stdin.write(HEAD.pack(kind, len(body)))
    proc.stdin.write(body)
    proc.stdin.flush()


def _frames(proc: subprocess.Popen[bytes], deadline: float) -> Iterator[tuple[bytes, bytes]]:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        head = _read_exact(fd, HEAD.size, deadline)
        if head is None:
            return
        kind, length = HEAD.unpack(head)
        if kind not in (b"R", b"D", b"E") or length > MAX_FRAME_BYTES:
            raise DecoderDown(f"the OTLP decoder sent a bad frame ({kind!r}, {length} bytes)")
        payload = _read_exact(fd, length, deadline)
        if payload is None:
            return
        yield kind, payload


def _read_exact(fd: int, n: int, deadline: float) -> bytes | None:
    """``n`` bytes from the pipe, None at EOF. Raises DecoderDown past ``deadline``."""
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise DecoderDown("the OTLP decoder did not answer in time")
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _records(payload: bytes) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in payload.splitlines() if line]
    if not all(isinstance(r, dict) for r in out):
        raise ValueError("a record that is not a JSON object")
    return out

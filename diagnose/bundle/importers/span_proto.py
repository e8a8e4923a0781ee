"""Import OTLP protobuf span files (``.binpb``): serialized ``ExportTraceServiceRequest`` (or
``TracesData``, the same wire format) messages, decoded by opentelemetry-proto and written through
the same path as OTLP/JSON (collectors/otlp_decode.py ``request_records``, span_files.write_spans).

Three layouts, told apart by the first bytes (``form_of``):

- ``single``: the file is one message (``request.SerializeToString()``); it starts with 0x0A
  (field 1, resource_spans, length-delimited).
- ``length-prefixed``: what the OpenTelemetry Collector's file exporter writes with
  ``format: proto``: each message preceded by its size as a 4-byte big-endian unsigned integer.
- ``decimal-lines``: its early versions' layout: the size in decimal digits and a newline, then
  the message.

Framed files are read one message at a time (memory: one message, at most MAX_DOC_BYTES); a
message that does not decode is skipped and counted, a last message cut short (a file still being
written) is noted. gzip is undone by the Artifact as for every importer.
"""
from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import closing
from enum import Enum
from typing import Any

from diagnose.agent.inproc.records import SpanCounts
from diagnose.bundle.importers.base import MAX_DOC_BYTES, Artifact, ImportContext, ImportFailed
from diagnose.bundle.importers.span_files import write_spans

_FIELD1_LEN = 0x0A  # tag of field 1 (resource_spans), wire type 2: the first byte of a request
_DECIMAL = re.compile(rb"(\d{1,10})\n")
PREFIX_BYTES = 4
PROTO_SUFFIXES = (".binpb", ".pb", ".protobuf", ".otlp")


class Form(Enum):
    SINGLE = "single"
    LENGTH_PREFIXED = "length-prefixed"
    DECIMAL_LINES = "decimal-lines"


def form_of(head: bytes) -> Form | None:
    """The layout that the first bytes of a file announce, or None (not OTLP protobuf)."""
    if head[:1] == bytes([_FIELD1_LEN]):
        return Form.SINGLE  # a 4-byte size starting 0x0A would be >= 160 MiB: never a frame here
    if len(head) > PREFIX_BYTES and head[PREFIX_BYTES] == _FIELD1_LEN and \
            0 < int.from_bytes(head[:PREFIX_BYTES], "big") <= MAX_DOC_BYTES:
        return Form.LENGTH_PREFIXED
    m = _DECIMAL.match(head)
    if m and head[m.end():m.end() + 1] == bytes([_FIELD1_LEN]):
        return Form.DECIMAL_LINES
    return None


class _ChunkIO(io.RawIOBase):
    """A raw binary stream over decompressed chunks (for io.BufferedReader's exact reads)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._rest = chunks, memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._rest:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._rest = memoryview(chunk)
        n = min(len(b), len(self._rest))
        b[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n


class Messages:
    """The messages of a file in layout ``form``, with the byte offset each frame starts at. After
    iterating, ``cut_at`` is where a last message cut short starts (None when none was).
    Iterating raises ImportFailed for a message larger than MAX_DOC_BYTES."""

    def __init__(self, chunks: Iterator[bytes], form: Form, name: str) -> None:
        self._fh = io.BufferedReader(_ChunkIO(chunks), 1 << 20)
        self._form, self._name = form, name
        self.offset = 0
        self.cut_at: int | None = None

    def _read(self, n: int) -> bytes:
        data = self._fh.read(n) if n else b""
        self.offset += len(data)
        return data

    def _too_large(self, size: int) -> ImportFailed:
        return ImportFailed(f"{self._name}: an OTLP protobuf message of {size} bytes (decompressed), over the "
                            f"{MAX_DOC_BYTES >> 20} MiB read whole; export in smaller batches")

    def _size(self) -> int | None:
        """The next frame's size, None at the end of the file (or of its whole frames)."""
        at = self.offset
        if self._form is Form.LENGTH_PREFIXED:
            prefix = self._read(PREFIX_BYTES)
            if len(prefix) < PREFIX_BYTES:
                self.cut_at = at if prefix else None
                return None
            return int.from_bytes(prefix, "big")
        line = self._fh.readline(12)
        self.offset += len(line)
        m = _DECIMAL.fullmatch(line)
        if m is None:
            self.cut_at = at if line.strip() else None
            return None
        return int(m.group(1))

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        if self._form is Form.SINGLE:
            data = self._read(MAX_DOC_BYTES + 1)
            if len(data) > MAX_DOC_BYTES:
                raise self._too_large(len(data))
            yield 0, data
            return
        while True:
            at = self.offset  # where the frame (its size, then the message) starts
            size = self._size()
            if size is None:
                return
            if size > MAX_DOC_BYTES:
                raise self._too_large(size)
            body = self._read(size)
            if len(body) < size:
                self.cut_at = at
                return
            yield at, body


def _decodes_with_spans(body: bytes) -> bool:
    from diagnose.collectors.otlp_decode import OtlpDecodeError, decode_protobuf

    try:
        request = decode_protobuf(body)
    except OtlpDecodeError:
        return False
    return any(ss.spans for rs in request.resource_spans for ss in rs.scope_spans)


class SpanProtoImporter:
    kind = "OpenTelemetry spans (OTLP protobuf)"
    collector = "otlp"

    def sniff(self, artifact: Artifact) -> bool:
        form = form_of(artifact.head)
        if form is None:
            return False
        try:
            with closing(artifact.stream()) as chunks:
                first = next(iter(Messages(chunks, form, str(artifact.path))), None)
        except ImportFailed:  # too large to be read whole: say so only for a file named as protobuf
            if artifact.path.suffix in PROTO_SUFFIXES:
                raise
            return False
        return first is not None and _decodes_with_spans(first[1])

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        from diagnose.collectors.otlp_decode import OtlpDecodeError, decode_protobuf, request_records

        form = form_of(artifact.head)
        if form is None:  # sniff said yes: the head has not changed
            raise ImportFailed(f"{artifact.path}: not an OTLP protobuf file")
        counts, bad = SpanCounts(), list[int]()

        def records() -> Iterator[dict[str, Any]]:
            for at, body in messages:
                try:
                    request = decode_protobuf(body)
                except OtlpDecodeError:
                    bad.append(at)
                    continue
                yield from request_records(request, "import", counts)

        with closing(artifact.stream()) as chunks:
            messages = Messages(chunks, form, str(artifact.path))
            write_spans(records(), counts, artifact, ctx)
        name = artifact.path.name
        ctx.note("otlp", f"{name}: OTLP protobuf ({form.value})")
        if bad:
            ctx.note("otlp", f"{name}: {len(bad)} message(s) that do not decode as an ExportTraceServiceRequest "
                             f"skipped, the first at byte {bad[0]}")
        if messages.cut_at is not None:
            ctx.note("otlp", f"{name}: the last message, at byte {messages.cut_at}, is cut short (a file still "
                             "being written?): ignored")


__all__ = ["Form", "Messages", "SpanProtoImporter", "form_of"]

"""The OTLP decoding child (collectors/otlp_worker.py is the parent's side and says why and how).

Run as ``python -m diagnose.collectors.otlp_child MEMORY_BYTES MAX_SPANS``: frames on stdin,
answers on stdout; RLIMIT_DATA is set to MEMORY_BYTES once the decoding modules are imported.
"""
from __future__ import annotations

import json
import os
import resource
import sys
from typing import BinaryIO

from google.protobuf import json_format  # noqa: F401 - imported before the memory cap

from diagnose.agent.inproc.records import SpanCounts
from diagnose.collectors.otlp_decode import (
    OtlpDecodeError,
    _request_class,
    cap_json_spans,
    cap_request_spans,
    decode_protobuf,
    load_json,
    request_records,
)
from diagnose.collectors.otlp_tolerant import decode_json_spans
from diagnose.collectors.otlp_worker import HEAD, RECORDS_CHUNK_BYTES

TOO_MUCH = "decoding the body needs more memory than the receiver allows; send smaller batches"


def _reply(out: BinaryIO, kind: bytes, payload: bytes) -> None:
    out.write(HEAD.pack(kind, len(payload)))
    out.write(payload)


def _error(out: BinaryIO, status: int, message: str) -> None:
    line = (message.splitlines() or [""])[0][:300]
    _reply(out, b"E", json.dumps({"status": status, "message": line}).encode())


def decode_one(kind: bytes, holder: list[bytes], max_spans: int, out: BinaryIO) -> None:
    """Decode the body in ``holder`` (taken out of it, so it is freed once decoded) and answer:
    R frames of records, then D (counts) or E (status, message)."""
    body = holder.pop()
    counts = SpanCounts()
    try:
        if kind == b"J":
            doc = load_json(body)
            del body
            over = cap_json_spans(doc, max_spans)
            request = decode_json_spans(doc, counts)  # one span protobuf refuses costs that span only
            del doc
        else:
            request = decode_protobuf(body)
            del body
            over = cap_request_spans(request, max_spans)
        chunk: list[str] = []
        size = 0
        for rec in request_records(request, "otlp", counts):
            line = json.dumps(rec, separators=(",", ":"), allow_nan=False, default=str)
            chunk.append(line)
            size += len(line) + 1
            if size >= RECORDS_CHUNK_BYTES:
                _reply(out, b"R", ("\n".join(chunk) + "\n").encode())
                chunk, size = [], 0
        if chunk:
            _reply(out, b"R", ("\n".join(chunk) + "\n").encode())
    except OtlpDecodeError as exc:
        if "alloc failed" in str(exc):  # upb's words for an arena past RLIMIT_DATA
            _error(out, 413, TOO_MUCH)
        else:
            _error(out, 400, str(exc))
        return
    except MemoryError:
        _error(out, 413, TOO_MUCH)
        return
    except Exception as exc:  # a decoder bug must not cost a restart per hostile body (the fuzz tests hunt these)
        _error(out, 400, f"cannot decode the body ({type(exc).__name__}: {exc})")
        return
    _reply(out, b"D", json.dumps({"counts": counts.to_json(), "over_cap": over}).encode())


def main(argv: list[str]) -> int:
    memory_bytes, max_spans = int(argv[1]), int(argv[2])
    _request_class()  # the generated protobuf classes, too, are loaded before the cap
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing printed by accident can break the frames
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    stdin = sys.stdin.buffer
    while True:
        head = stdin.read(HEAD.size)
        if len(head) < HEAD.size:
            return 0
        kind, length = HEAD.unpack(head)
        holder = [stdin.read(length)]
        if len(holder[0]) < length:
            return 0
        try:
            decode_one(kind, holder, max_spans, out)
        except MemoryError:  # not even the answer could be built: the parent restarts the child
            return 1
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

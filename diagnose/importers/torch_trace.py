"""Import a torch profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, of any size.

Sniffing reads the document only up to the start of its root-level ``traceEvents`` array (Kineto
writes schemaVersion, deviceProperties and distributedInfo first; the array may come first too),
at most MAX_SNIFF_BYTES. Loading streams the file once (trace_stream.py): memory stays bounded
on a trace far larger than its object graph would fit in.

The trace is stored gzipped as ``torch/trace-NNNN.json.gz`` exactly as it was (re-compressed only
when it came uncompressed) and indexed in ``torch.jsonl``. Its place on the Unix clock comes from
Kineto's ``baseTimeNanoseconds`` (event ``ts`` are us from it); without it (older torch) ``ts``
that are already Unix µs are taken as they are, and any other trace gets ``start_ns``/``end_ns``
None: it can be analysed alone but not aligned with other streams.
A JSON document cut short is imported up to its last complete event, with a note saying where.
"""
from __future__ import annotations

from contextlib import closing
from typing import Any, Iterable

from diagnose.importers.base import Artifact, ImportContext, ImportFailed
from diagnose.importers.trace_stream import copy_and_skim
from diagnose.signals.kineto.reader import MIN_UNIX_US

EVENTS_KEY = "traceEvents"
MAX_SNIFF_BYTES = 16 << 20  # the events array must start within this (the reader keeps no more metadata)
SNIFF_STEP = 64 << 10  # bytes tokenised at a time: the walk stops soon after the array starts


def is_torch_trace(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get(EVENTS_KEY), list)


def events_array_ahead(chunks: Iterable[bytes]) -> bool | None:
    """Whether a JSON object's root-level ``traceEvents`` value is an array, judged from the tokens
    before it (ijson: values are tokenised, never built) within the first MAX_SNIFF_BYTES.

    False for any other document (an array, a scalar, an object without the key). None when the
    text stops being strict JSON (or stops) before the answer, e.g. a bare NaN in the metadata.
    """
    import ijson

    tokens = ijson.sendable_list()
    coro = ijson.parse_coro(tokens, use_float=True)
    seen = 0
    try:
        for chunk in chunks:
            for i in range(0, len(chunk), SNIFF_STEP):
                coro.send(chunk[i:i + SNIFF_STEP])
                answer = _answer(tokens)
                if answer is not None:
                    return answer
                del tokens[:]
                seen += min(SNIFF_STEP, len(chunk) - i)
                if seen >= MAX_SNIFF_BYTES:
                    return False
        coro.close()
    except ijson.JSONError:
        return _answer(tokens)
    return False


def _answer(tokens: list[tuple[str, str, Any]]) -> bool | None:
    for prefix, event, _ in tokens:
        if prefix == EVENTS_KEY and event == "start_array":  # nested keys have dotted prefixes
            return True
        if prefix == "" and event not in ("start_map", "map_key"):
            return False
    return None


class TorchTraceImporter:
    kind = "torch trace"
    collector = "agent"

    def sniff(self, artifact: Artifact) -> bool:
        if artifact.head.lstrip()[:1] != b"{":
            return False
        with closing(artifact.stream()) as chunks:
            found = events_array_ahead(chunks)
        if found is None and artifact.complete:  # not strict JSON: a small file is parsed tolerantly
            return is_torch_trace(artifact.doc)
        return bool(found)

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        n = ctx.next_index("torch")
        rel = f"torch/trace-{n:04d}.json.gz"
        skim, stream = copy_and_skim(artifact, ctx.writer.file_path(rel))
        if not stream.events_seen:
            raise ImportFailed(f"{artifact.path}: the trace reader finds no {EVENTS_KEY} array in it; export "
                               "the trace again with torch.profiler")
        if stream.truncated_at_byte is not None and not skim.events:
            raise ImportFailed(f"{artifact.path}: {stream.error} at byte {stream.truncated_at_byte}, before "
                               "any complete event; copy or export the trace again completely")
        meta = stream.metadata
        base = meta.get("baseTimeNanoseconds")
        base = int(base) if isinstance(base, (int, float)) and base > 0 else None
        bounds = skim.span_us()
        start_ns = end_ns = None
        unix_ts = base is None and bounds is not None and bounds[0] >= MIN_UNIX_US  # ts already Unix µs
        if bounds is not None and (base is not None or unix_ts):
            start_ns, end_ns = (base or 0) + int(bounds[0] * 1000), (base or 0) + int(bounds[1] * 1000)
        ctx.writer.stream("torch.jsonl").write({
            "file": rel, "start_ns": start_ns, "end_ns": end_ns, "base_time_ns": base,
            "activities": ["cpu", "cuda"] if skim.gpu else ["cpu"],
            "torch_version": str(meta.get("torch_version") or "unknown"),
            "error": None, "imported_from": str(artifact.path),
        })
        ctx.saw_time(start_ns, end_ns)
        ctx.produced("agent", artifact.path, torch_traces=1, torch_events=skim.events)
        if start_ns is None:
            ctx.note("agent", f"{artifact.path.name} has no baseTimeNanoseconds: not placed on the Unix "
                              "clock")
        if stream.truncated_at_byte is not None:
            ctx.note("agent", f"{artifact.path.name}: {stream.error} at byte {stream.truncated_at_byte}; "
                              f"the {skim.events} events before it were imported")

"""Import a torch profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, of any size.

Sniffing reads the document only up to the start of its root-level ``traceEvents`` array (Kineto
writes schemaVersion, deviceProperties and distributedInfo first; the array may come first too),
at most MAX_SNIFF_BYTES. Loading streams the file once (trace_stream.py): memory stays bounded
on a trace far larger than its object graph would fit in.

The trace is stored gzipped as a ``TORCH_TRACES`` file exactly as it was (re-compressed only
when it came uncompressed) and indexed in ``TORCH``. Its place on the Unix clock comes from
Kineto's ``baseTimeNanoseconds`` (event ``ts`` are us from it); without it (older torch) ``ts``
that are already Unix µs are taken as they are, and any other trace gets ``start_ns``/``end_ns``
None: it can be analysed alone but not aligned with other streams.
A JSON document cut short is imported up to its last complete event, with a note saying where.
A malformed event is dropped and counted and the events after it are kept (the reader restarts at
the next event); one with unescaped backslashes in a string (Windows paths) is repaired and kept;
the notes name how many and the byte offset of the first.
"""
from __future__ import annotations

from collections.abc import Iterable
from contextlib import closing

from diagnose.bundle.importers.base import Artifact, ImportContext, ImportFailed
from diagnose.bundle.importers.trace_stream import copy_and_skim, copy_trace
from diagnose.bundle.streams import TORCH, TORCH_TRACES
from diagnose.traces.reader import MIN_UNIX_US, base_time_ns, plausible_ns
from diagnose.traces.scan import ScanState, scan

EVENTS_KEY = "traceEvents"
MAX_SNIFF_BYTES = 16 << 20  # the events array must start within this (the reader keeps no more metadata)
SNIFF_STEP = 64 << 10  # bytes scanned at a time: the walk stops soon after the array starts


def events_array_ahead(chunks: Iterable[bytes]) -> bool:
    """Whether a JSON object's root-level ``traceEvents`` value is an array, judged by the trace
    reader's structural scanner (scan.py: brackets and quotes only, no tokens or values built, so
    cost and memory stay linear however deep the text nests; bare NaN/Infinity in the metadata do
    not matter) within the first MAX_SNIFF_BYTES.

    False for any other document (an array, a scalar, an object without the key, a text that
    ends or closes before the key).
    """
    st = ScanState()
    seen = 0
    held = b""
    for chunk in chunks:
        for i in range(0, len(chunk), SNIFF_STEP):
            piece = held + chunk[i:i + SNIFF_STEP]
            keep = len(piece) - len(piece.rstrip(b"\\"))  # never cut inside a backslash run
            piece, held = piece[:len(piece) - keep], piece[len(piece) - keep:]
            scan(piece, st)
            del st.skeleton[:]  # the metadata is not needed here
            if st.events_seen:
                return st.root == ord("{")
            if st.done or (st.root is not None and st.root != ord("{")):
                return False
            seen += len(piece)
            if seen >= MAX_SNIFF_BYTES:
                return False
    return False


class TorchTraceImporter:
    kind = "torch trace"
    collector = "agent"

    def sniff(self, artifact: Artifact) -> bool:
        if artifact.head.lstrip()[:1] != b"{":
            return False
        with closing(artifact.stream()) as chunks:
            return events_array_ahead(chunks)

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        n = ctx.next_index("torch")
        rel = TORCH_TRACES.file(n)
        skimmed = ctx.skimmed.get(str(artifact.path))  # by a worker (import_files with a fan-out)
        dst = ctx.writer.file_path(rel)
        skim, stream = copy_trace(artifact, dst, skimmed) if skimmed else copy_and_skim(artifact, dst)
        if not stream.events_seen:
            raise ImportFailed(f"{artifact.path}: the trace reader finds no {EVENTS_KEY} array in it; export "
                               "the trace again with torch.profiler")
        if stream.truncated_at_byte is not None and not skim.events:
            raise ImportFailed(f"{artifact.path}: {stream.error} at byte {stream.truncated_at_byte}, before "
                               "any complete event; copy or export the trace again completely")
        meta = stream.metadata
        raw_base = meta.get("baseTimeNanoseconds")
        base = base_time_ns(raw_base)
        bounds = skim.span_us()
        start_ns = end_ns = None
        unplaced = "has no baseTimeNanoseconds"
        if raw_base is not None and base is None:
            unplaced = f"has a baseTimeNanoseconds ({str(raw_base)[:40]}) that is not a Unix time in ns (ignored)"
        unix_ts = base is None and bounds is not None and bounds[0] >= MIN_UNIX_US  # ts already Unix µs
        if bounds is not None and (base is not None or unix_ts):
            start_ns, end_ns = (base or 0) + int(bounds[0] * 1000), (base or 0) + int(bounds[1] * 1000)
            if not (plausible_ns(start_ns) and plausible_ns(end_ns)):
                unplaced = (f"has event times that fall outside 2000-2100 on the Unix clock (ts {bounds[0]:.6g} to "
                            f"{bounds[1]:.6g} us)")
                start_ns = end_ns = None
        ctx.writer.stream(TORCH.name).write({
            "file": rel, "start_ns": start_ns, "end_ns": end_ns, "base_time_ns": base,
            "activities": ["cpu", "cuda"] if skim.gpu else ["cpu"],
            "torch_version": str(meta.get("torch_version") or "unknown"),
            "error": None, "imported_from": str(artifact.path),
        })
        ctx.saw_time(start_ns, end_ns)
        dropped = {"torch_events_dropped": stream.unparsable} if stream.unparsable else {}
        ctx.produced("agent", artifact.path, torch_traces=1, torch_events=skim.events, **dropped)
        for note in stream.damage.notes():
            ctx.note("agent", f"{artifact.path.name}: {note}")
        if start_ns is None:
            ctx.note("agent", f"{artifact.path.name} {unplaced}: not placed on the Unix clock")
        if skim.out_of_range:
            ctx.note("agent", f"{artifact.path.name}: {skim.out_of_range} event(s) with an impossible "
                              "timestamp (|ts| beyond 4.1e15 us, past year 2100) ignored")
        if stream.ignored_after:
            ctx.note("agent", f"{artifact.path.name}: {stream.ignored_after} bytes after the first JSON "
                              "document ignored (only one document is read)")
        if stream.truncated_at_byte is not None:
            ctx.note("agent", f"{artifact.path.name}: {stream.error} at byte {stream.truncated_at_byte}; "
                              f"the {skim.events} events before it were imported")

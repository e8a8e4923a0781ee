"""Import span dumps: OTLP/JSON exports (one request, or one per line as the collector's file
exporter writes them; hex or base64 ids) and the Python SDK's ConsoleSpanExporter output (``0x`` ids,
ISO-8601 times). Spans go to the ``SPANS`` stream with ``source: "import"``; spans that cannot be placed
on the timeline (end before start, no start, bad ids, a time out of range) are counted, not written;
one span that does not decode costs that span, not the file (collectors/otlp_tolerant.py). The
bundle's time window leaves out server-lifetime root spans (signals/spans/lifetime.py), and says so.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

from diagnose.agent.inproc.records import LONG_SPAN_NS, SpanCounts
from diagnose.bundle.importers.base import Artifact, ImportContext, ImportFailed
from diagnose.bundle.streams import SPANS
from diagnose.signals.spans.lifetime import RULE, lifetime_mask


def _looks_like_spans(doc: Any) -> bool:
    from diagnose.collectors.otlp_decode import is_console_span, is_otlp_doc

    items = doc if isinstance(doc, list) else [doc]
    return bool(items) and (is_otlp_doc(items[0]) or is_console_span(items[0]))


class SpanFileImporter:
    kind = "OpenTelemetry spans"
    collector = "otlp"

    def sniff(self, artifact: Artifact) -> bool:
        doc = artifact.doc
        if doc is not None:
            return _looks_like_spans(doc)
        # several documents back to back: judge by the first one
        from diagnose.collectors.otlp_decode import OtlpDecodeError, json_documents

        if artifact.head.lstrip()[:1] not in (b"{", b"["):
            return False
        try:
            return _looks_like_spans(next(json_documents(artifact.text()), None))
        except OtlpDecodeError:
            return False

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        from diagnose.collectors.otlp_decode import OtlpDecodeError, file_records

        counts = SpanCounts()
        try:
            write_spans(file_records(artifact.text(), "import", counts), counts, artifact, ctx)
        except OtlpDecodeError as exc:
            raise ImportFailed(f"{artifact.path}: {exc}; pass an OTLP/JSON export or console-exporter "
                               "output") from None


def write_spans(records: Iterable[dict[str, Any]], counts: SpanCounts, artifact: Artifact,
                ctx: ImportContext) -> None:
    """Write SPANS ``records`` (counted in ``counts`` by their producer) into the bundle, with the
    file's counts, notes and time window. Raises what ``records`` raises."""
    stream = ctx.writer.stream(SPANS.name)
    times = _Times()
    for rec in records:
        stream.write(rec)
        times.add(rec["start_ns"], rec["end_ns"], rec["parent_span_id"] is None)
    lifetime = times.saw(ctx)
    ctx.produced("otlp", artifact.path, **{k: v for k, v in counts.to_json().items()
                                           if not isinstance(v, dict)})
    for why, n in counts.rejected.items():
        ctx.note("otlp", f"{artifact.path.name}: {n} span(s) rejected ({why})")
    if lifetime:
        ctx.note("otlp", f"{artifact.path.name}: {lifetime} root span(s) left out of the bundle's time "
                         f"window as server-lifetime spans ({RULE})")


class _Times:
    """The spans' times as they stream past (16 bytes a span), for the bundle's time window."""

    def __init__(self) -> None:
        self.start, self.end, self.root = array("q"), array("q"), array("b")

    def add(self, start: int, end: int | None, root: bool) -> None:
        self.start.append(start)
        self.end.append(end or start)
        self.root.append(root and end is not None)

    def saw(self, ctx: ImportContext) -> int:
        """Report the window to ``ctx``: every span's times, except server-lifetime roots
        (lifetime.RULE) and, without enough spans for that rule, the start of a span over an hour
        (its end still counts). Returns how many lifetime roots were left out."""
        start, end = np.frombuffer(self.start, np.int64), np.frombuffer(self.end, np.int64)
        roots = np.frombuffer(self.root, np.int8).astype(bool)
        out = np.zeros(len(start), bool)
        out[roots] = lifetime_mask(start[roots], end[roots])
        if not len(start) or out.all():
            return 0
        keep = ~out
        short = keep & (end - start <= LONG_SPAN_NS)
        ctx.saw_time(int(end[keep].max()), int(start[short].min()) if short.any() else None)
        return int(out.sum())

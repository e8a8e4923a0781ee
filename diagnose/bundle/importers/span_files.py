"""Import span dumps: OTLP/JSON exports (one request, or one per line as the collector's file
exporter writes them; hex or base64 ids) and the Python SDK's ConsoleSpanExporter output (``0x`` ids,
ISO-8601 times). Spans go to the ``SPANS`` stream with ``source: "import"``; spans that cannot be placed
on the timeline (end before start, no start, bad ids) are counted, not written.
"""
from __future__ import annotations

from typing import Any

from diagnose.agent.inproc.records import LONG_SPAN_NS, SpanCounts
from diagnose.bundle.importers.base import Artifact, ImportContext, ImportFailed
from diagnose.bundle.streams import SPANS


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
        stream = ctx.writer.stream(SPANS.name)
        try:
            for rec in file_records(artifact.text(), "import", counts):
                stream.write(rec)
                start, end = rec["start_ns"], rec["end_ns"]
                # a day-long span must not stretch the bundle's time range: its end counts, its start not
                ctx.saw_time(end or start, start if end and end - start <= LONG_SPAN_NS else None)
        except OtlpDecodeError as exc:
            raise ImportFailed(f"{artifact.path}: {exc}; pass an OTLP/JSON export or console-exporter "
                               "output") from None
        ctx.produced("otlp", artifact.path, **{k: v for k, v in counts.to_json().items()
                                               if not isinstance(v, dict)})
        for why, n in counts.rejected.items():
            ctx.note("otlp", f"{artifact.path.name}: {n} span(s) rejected ({why})")

"""Seeds of the fuzz tests, made by the real producers: the OpenTelemetry SDK's spans as its OTLP
encoder writes them (protobuf, and OTLP/JSON with hex ids and with proto3's base64 ids) and as its
ConsoleSpanExporter prints them."""
from __future__ import annotations

import base64
import json

import pytest

from otlp_helpers import receiver  # noqa: F401  (fixture)

ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _sdk_spans() -> list:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "fuzz-seed", "host.cores": 8}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("fuzz", "1.0")
    with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER) as req:
        req.set_attribute("http.route", "/v1/generate")
        req.set_attribute("tokens", [1, 2, 3])
        req.set_attribute("ratio", 0.25)
        req.set_attribute("cached", False)
        with tracer.start_as_current_span("tokenize") as tok:
            tok.add_event("tokens", {"n": 12, "model": "m"})
        with tracer.start_as_current_span("generate", kind=trace.SpanKind.CLIENT,
                                          links=[trace.Link(tok.get_span_context(), {"why": "after"})]) as gen:
            gen.set_status(trace.Status(trace.StatusCode.ERROR, "timeout"))
            gen.record_exception(TimeoutError("upstream"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _hex_ids(node):
    """OTLP/JSON proper: ids as hex (MessageToDict writes proto3's base64)."""
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    if isinstance(node, dict):
        return {k: base64.b64decode(v).hex() if k in ID_KEYS and isinstance(v, str) else _hex_ids(v)
                for k, v in node.items()}
    return node


@pytest.fixture(scope="session")
def otel_seeds() -> dict[str, list[bytes]]:
    """{"protobuf": [...], "json": [...], "console": [...]}: bytes of real exports."""
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = _sdk_spans()
    requests = [encode_spans(spans), encode_spans(spans[:1])]
    docs = [json_format.MessageToDict(r) for r in requests]
    return {
        "protobuf": [r.SerializeToString() for r in requests],
        "json": [json.dumps(_hex_ids(d)).encode() for d in docs] + [json.dumps(docs[0]).encode(),
                 "\n".join(json.dumps(_hex_ids(d)) for d in docs).encode()],  # one request per line
        "console": ["".join(s.to_json() for s in spans).encode(), spans[0].to_json(indent=None).encode()],
    }

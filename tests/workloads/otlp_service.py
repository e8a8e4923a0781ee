"""A service that exports its spans with the real OTLP/HTTP exporter (opentelemetry-exporter-otlp-
proto-http), configured only by OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. Prints READY, then starts
tracing when a line arrives on stdin (so the receiver is listening first). Bounded: 60 s."""
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

print("READY", flush=True)
sys.stdin.readline()
provider = TracerProvider(resource=Resource.create({"service.name": "otlp-service"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("otlp-service")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    with tracer.start_as_current_span("handle", kind=trace.SpanKind.SERVER):
        with tracer.start_as_current_span("tokenize"):
            time.sleep(0.005)
        with tracer.start_as_current_span("generate"):
            time.sleep(0.02)
provider.shutdown()

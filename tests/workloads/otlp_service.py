"""A service that exports its spans with the real OTLP/HTTP exporter (opentelemetry-exporter-otlp-
proto-http), configured only by OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. Prints READY, then starts
tracing when a line arrives on stdin (so the receiver is listening first), for argv[1] seconds
(default 60), and exits once its exporter has sent the last batch."""
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
deadline = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)
while time.monotonic() < deadline:
    with tracer.start_as_current_span("handle", kind=trace.SpanKind.SERVER):
        with tracer.start_as_current_span("tokenize"):
            time.sleep(0.005)
        with tracer.start_as_current_span("generate"):
            time.sleep(0.02)
provider.shutdown()

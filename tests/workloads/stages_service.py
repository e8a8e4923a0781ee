"""A traced service whose requests have preprocess / model / postprocess stages, exported with the
real OTLP/HTTP exporter (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Prints READY, starts when a line
arrives on stdin (so the receiver listens first), runs for argv[1] seconds (default 60)."""
import json
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

PAYLOAD = {"rows": [{"id": i, "values": [i * 0.5] * 10} for i in range(300)]}
print("READY", flush=True)
sys.stdin.readline()
provider = TracerProvider(resource=Resource.create({"service.name": "stages-service"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("stages-service")
deadline = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)
while time.monotonic() < deadline:
    with tracer.start_as_current_span("handle", kind=trace.SpanKind.SERVER):
        with tracer.start_as_current_span("preprocess"):
            json.loads(json.dumps(PAYLOAD))
        with tracer.start_as_current_span("model.generate.decode_step"):
            time.sleep(0.02)
        with tracer.start_as_current_span("postprocess"):
            json.dumps(PAYLOAD)
provider.shutdown()

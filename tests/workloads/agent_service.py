"""A small torch + OpenTelemetry "inference service" for the agent tests.

One serving thread handles requests in a loop: span "request" (SERVER) with child stages "queue"
(sleep in wait_in_queue), "model" (an MLP forward in run_model) and "serialize" (json in
serialize). Prints READY after the first request. Bounded: exits after --max-s seconds.

--provider sdk|late|none|noop : OpenTelemetry SDK provider set at start / after 1 s / never / NoOp
--fork N      : fork N worker processes that serve too (prints WORKER <pid> per worker)
--bad-spans   : also emit a span never ended, one ending before it starts, one 24 h long
--no-torch    : serve without torch (model stage is pure Python)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("--provider", default="sdk", choices=["sdk", "late", "none", "noop"])
p.add_argument("--fork", type=int, default=0)
p.add_argument("--bad-spans", action="store_true")
p.add_argument("--no-torch", action="store_true")
p.add_argument("--max-s", type=float, default=90.0)
p.add_argument("--model-iters", type=int, default=12, help="MLP forwards per model stage")
args = p.parse_args()

from opentelemetry import trace  # noqa: E402

torch = None
if not args.no_torch:
    import torch

    torch.set_num_threads(1)
    MODEL = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))


def set_provider() -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "agent-test"})))


if args.provider == "sdk":
    set_provider()
elif args.provider == "noop":
    trace.set_tracer_provider(trace.NoOpTracerProvider())
elif args.provider == "late":
    threading.Timer(1.0, set_provider).start()

tracer = trace.get_tracer("agent-test")


def wait_in_queue() -> None:
    time.sleep(0.02)


def run_model() -> None:
    if torch is None:
        sum(i * i for i in range(60_000))
        return
    x = torch.randn(64, 256)
    with torch.no_grad():
        for _ in range(args.model_iters):
            x = MODEL(x)


def serialize() -> str:
    for _ in range(100):  # reference cycles: only the cyclic GC frees them, so GC pauses happen
        node: list = []
        node.append(node)
    return json.dumps({"tokens": list(range(2000))})


def bad_spans() -> None:
    now = time.time_ns()
    tracer.start_span("never-ended", start_time=now)  # left open on purpose
    tracer.start_span("ends-before-start", start_time=now).end(end_time=now - 10**9)
    tracer.start_span("day-long", start_time=now - 24 * 3600 * 10**9).end(end_time=now)


def serve(ready: threading.Event) -> None:
    n = 0
    while True:
        with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("request.n", n)
            span.set_attribute("payload", "x" * 5000)  # longer than the agent's attribute bound
            with tracer.start_as_current_span("queue"):
                wait_in_queue()
            with tracer.start_as_current_span("model"):
                run_model()
            with tracer.start_as_current_span("serialize"):
                serialize()
        if args.bad_spans and n % 20 == 0:
            bad_spans()
        n += 1
        ready.set()


def main() -> None:
    for _ in range(args.fork):
        pid = os.fork()
        if pid == 0:
            ready = threading.Event()
            threading.Thread(target=serve, args=(ready,), name="serve", daemon=True).start()
            time.sleep(args.max_s)
            os._exit(0)
        print(f"WORKER {pid}", flush=True)
    ready = threading.Event()
    threading.Thread(target=serve, args=(ready,), name="serve", daemon=True).start()
    ready.wait(60)
    print("READY", flush=True)
    time.sleep(args.max_s)
    sys.exit(0)


if __name__ == "__main__":
    main()

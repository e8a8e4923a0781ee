"""A torch + OpenTelemetry service whose CPU preprocessing starves the model (timeline join tests).

One serving thread handles requests in a loop: span "request" (SERVER) with child stages
"preprocess" (pure-Python tokenize() of a long text: most of the time), "model" (a small MLP
forward in run_model, on the GPU with --device cuda) and "postprocess". Prints READY after the
first request. Bounded: exits after --max-s seconds.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("--words", type=int, default=40_000, help="words tokenized per request")
p.add_argument("--max-s", type=float, default=90.0)
p.add_argument("--device", default="cpu", help="cpu, or cuda: the model's kernels then run on the GPU")
args = p.parse_args()

import torch  # noqa: E402
import torch.profiler  # noqa: E402,F401  loaded up front: the agent's profiler window then starts at once
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

torch.set_num_threads(1)
DEVICE = torch.device(args.device)
MODEL = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128)).to(DEVICE)
trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "starved"})))
tracer = trace.get_tracer("starved")
TEXT = " ".join(f"Word{i % 997}, token{i % 13}." for i in range(args.words))
VOCAB: dict[str, int] = {}


def tokenize(text: str) -> list[int]:
    ids = []
    for word in text.split():
        w = word.lower().strip(".,;")
        ids.append(VOCAB.setdefault(w, len(VOCAB)) % 128)
    return ids


def run_model(ids: list[int]) -> float:
    x = torch.zeros(8, 128)
    x[:, : min(128, len(ids))] = torch.tensor(ids[:128], dtype=torch.float32)
    with torch.no_grad():
        return float(MODEL(x.to(DEVICE)).sum())  # float() waits for the GPU: one request at a time


def serve(ready: threading.Event) -> None:
    n = 0
    while True:
        with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("request.n", n)
            with tracer.start_as_current_span("preprocess"):
                ids = tokenize(TEXT)
            with tracer.start_as_current_span("model"):
                out = run_model(ids)
            with tracer.start_as_current_span("postprocess"):
                str(round(out, 3))
        n += 1
        ready.set()


def main() -> None:
    ready = threading.Event()
    threading.Thread(target=serve, args=(ready,), name="serve", daemon=True).start()
    ready.wait(60)
    print("READY", flush=True)
    time.sleep(args.max_s)
    sys.exit(0)


if __name__ == "__main__":
    main()

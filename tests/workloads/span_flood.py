"""Root spans at a steady rate, more than the in-process agent's span queue holds (under
`diagnose run`), for the span-coverage test; or requests as fast as it can, for the span-budget test.

--rate N        root spans per second (paced in 5 ms steps); 0: requests (a root span and a child
                span each) as fast as this thread makes them, printing "COUNT <unix ns> <requests
                served>" every 0.1 s
--queue N       lower the agent's queue bound (diagnose.agent.inproc.spans.MAX_QUEUED_SPANS) so it
                overflows between the capture thread's drains, as 100,000 does at ~35k spans/s
--span-share X  the agent's span CPU budget (diagnose.agent.inproc.spanbudget.SPAN_CPU_SHARE; a
                large one turns its sampling off)
--count-file F  append "<unix ns> <spans ended>" every 0.1 s: the rate the target really served
Prints READY once spans flow. Bounded: exits after --max-s seconds.
"""
from __future__ import annotations

import argparse
import sys
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

p = argparse.ArgumentParser()
p.add_argument("--rate", type=float, default=3000.0)
p.add_argument("--queue", type=int, default=0)
p.add_argument("--span-share", type=float, default=0.0)
p.add_argument("--count-file", default=None)
p.add_argument("--max-s", type=float, default=60.0)
args = p.parse_args()

if args.queue:
    from diagnose.agent.inproc import spans as agent_spans

    agent_spans.MAX_QUEUED_SPANS = args.queue
if args.span_share:
    from diagnose.agent.inproc import spanbudget

    spanbudget.SPAN_CPU_SHARE = args.span_share
trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("span-flood")
STEP_S = 0.005


def flat_out(deadline: float) -> None:
    """Requests (a server span with one child) as fast as this thread makes them."""
    n, next_note = 0, time.monotonic()
    print("READY", flush=True)
    while True:
        for _ in range(32):
            with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER):
                with tracer.start_as_current_span("SELECT", kind=trace.SpanKind.CLIENT):
                    pass
        n += 32
        now = time.monotonic()
        if now >= next_note:
            print(f"COUNT {time.time_ns()} {n}", flush=True)
            next_note = now + 0.1
            if now >= deadline:
                return


def main() -> None:
    if args.rate <= 0:
        flat_out(time.monotonic() + args.max_s)
        sys.exit(0)
    out = open(args.count_file, "a", buffering=1) if args.count_file else None  # noqa: SIM115 - lives as long as the loop
    start = time.monotonic()
    deadline, n, next_note = start + args.max_s, 0, start
    ready = False
    while time.monotonic() < deadline:
        due = int((time.monotonic() - start) * args.rate)
        while n < due:
            with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER):
                pass
            n += 1
        now = time.monotonic()
        if out is not None and now >= next_note:
            out.write(f"{time.time_ns()} {n}\n")
            next_note = now + 0.1
        if not ready and n:
            print("READY", flush=True)
            ready = True
        time.sleep(STEP_S)
    sys.exit(0)


if __name__ == "__main__":
    main()

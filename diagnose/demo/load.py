"""The demo's load generator process: open-loop Poisson arrivals at a scenario's QPS until stopped.

``python -m diagnose.demo.load --url URL --scenario NAME --qps Q [--connections N]`` sends the
scenario's request body (diagnose/demo/bodies.py) until SIGTERM or SIGINT (or ``--max-seconds``),
then prints one JSON line, its client-side view, and exits at once (requests still open are censored):
{"offered_qps", "achieved_qps", "requests" (answered 2xx), "errors", "unfinished", "p50_ms",
"p99_ms", "mean_ms", "first_error"}; latencies in ms from each request's scheduled arrival.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading

from diagnose.demo.bodies import request_body
from diagnose.demo.openloop import OpenLoopError, run_until_stopped
from diagnose.demo.scenarios import DEFAULT_SCENARIO, SCENARIOS


def stats_line(result: object) -> str:
    """The one JSON line: the result's fields, milliseconds rounded to 0.01, ``ok`` as ``requests``."""
    doc = dataclasses.asdict(result)  # type: ignore[call-overload]
    doc["requests"] = doc.pop("ok")
    return json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in doc.items()})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default=DEFAULT_SCENARIO)
    ap.add_argument("--qps", type=float, required=True,
                    help="offered rate (diagnose/demo/runner.py: the scenario's load times the measured capacity)")
    ap.add_argument("--connections", type=int, help="client connections (default: the scenario's)")
    ap.add_argument("--max-seconds", type=float, default=3600.0)
    args = ap.parse_args(argv)
    sc = SCENARIOS[args.scenario]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        result = run_until_stopped(args.url, args.qps, stop, max_s=args.max_seconds,
                                   body=request_body(sc.name), connections=args.connections or sc.connections)
    except OpenLoopError as exc:
        ap.error(str(exc))
    sys.stdout.write(stats_line(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # the connections still waiting on a slow server end with the process, now


if __name__ == "__main__":
    main()

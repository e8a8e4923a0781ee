"""Closed-loop load generator for the demo services: N keep-alive clients on 127.0.0.1.

The body is the numpy service's (``{"inputs": batch x 256 floats}``, diagnose/demo/service.py) or,
with ``--scenario NAME``, that scenario's of the aiohttp demo server (diagnose/demo/bodies.py).

Bounded in time (``--max-seconds``) and count (``--max-requests``); on SIGTERM or when a bound is
reached it prints one JSON line of stats (requests, errors, QPS, P50/P99 latency in ms).
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import threading
import time
from urllib.parse import urlsplit

import numpy as np


def bodies_for(batch: int, scenario: str | None) -> list[bytes]:
    """A handful of pre-encoded bodies: the client must stay cheap so the service is what we measure."""
    if scenario is not None:
        from diagnose.demo.bodies import request_body

        return [request_body(scenario, seed) for seed in range(8)]
    rng = random.Random()
    return [json.dumps({"inputs": [[rng.random() for _ in range(256)] for _ in range(batch)]}).encode()
            for _ in range(8)]


def client(host: str, port: int | None, bodies: list[bytes], stop: threading.Event, lat_ms: list[float],
           errors: list[int], budget: list[int], lock: threading.Lock) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    rng = random.Random()
    while not stop.is_set():
        with lock:
            if budget[0] <= 0:
                stop.set()
                break
            budget[0] -= 1
        body = rng.choice(bodies)
        t0 = time.perf_counter()
        try:
            conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=10)
            stop.wait(0.05)
        with lock:
            (lat_ms.append((time.perf_counter() - t0) * 1e3) if ok else errors.append(1))
    conn.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--max-requests", type=int, default=1_000_000)
    ap.add_argument("--scenario", help="Send this demo-server scenario's bodies (diagnose.demo.server).")
    args = ap.parse_args(argv)
    url = urlsplit(args.url)
    if url.hostname is None:
        ap.error(f"--url {args.url!r} names no host; give e.g. http://127.0.0.1:8000")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    lat: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    budget = [args.max_requests]
    t0 = time.monotonic()
    bodies = bodies_for(args.batch, args.scenario)
    threads = [threading.Thread(target=client, args=(url.hostname, url.port, bodies, stop, lat, errors, budget,
                                                     lock), daemon=True) for _ in range(args.clients)]
    for t in threads:
        t.start()
    stop.wait(args.max_seconds)
    stop.set()
    for t in threads:
        t.join(12)
    elapsed = time.monotonic() - t0
    arr = np.asarray(lat) if lat else np.asarray([np.nan])
    print(json.dumps({
        "requests": len(lat), "errors": len(errors), "qps": round(len(lat) / elapsed, 1),
        "p50_ms": round(float(np.percentile(arr, 50)), 2), "p99_ms": round(float(np.percentile(arr, 99)), 2),
    }), flush=True)


if __name__ == "__main__":
    main()

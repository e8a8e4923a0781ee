"""Open-loop load generator: Poisson arrivals at a fixed rate against one HTTP URL.

Closed-loop clients (``loadgen.py``) wait for each response before sending the next request, so a
slow server slows the clients down and its queueing never shows in their latencies ("coordinated
omission", G. Tene). Here the arrival times are drawn up front (exponential gaps at ``rate_qps``) and
every latency is measured from the request's *scheduled* arrival, not from when a connection was free
to send it: when the server falls behind, the wait in the client's backlog counts, as it would for a
real user. Requests still unsent or unanswered when the step's drain time ends are censored at that
moment (their latency is at least that long) and counted as ``unfinished``.

Threading: ``connections`` worker threads, each with its own keep-alive ``http.client`` connection,
claim the next arrival under one lock, sleep until its time and send it; results land in
preallocated slots, one per arrival, written by the worker that claimed it. Nothing here prints.
"""
from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

DEMO_BATCH, DEMO_FEATURES = 8, 256
LEAD_S = 0.05  # the first arrival waits this long, so every worker has started
MAX_BODY = 4 << 20  # bytes of one response read at most; a longer one is an error (memory stays bounded)
JOIN_S = 1.0  # after the cut, how long the workers get to notice (daemons: the rest end with the process)


class OpenLoopError(ValueError):
    """The URL or the rate cannot be used."""


@dataclass(frozen=True)
class OpenLoopResult:
    """One step of offered load, warm-up excluded."""

    offered_qps: float
    duration_s: float  # the measured window (warm-up excluded)
    scheduled: int  # arrivals scheduled in the window
    ok: int  # of those, answered 2xx
    errors: int  # of those, non-2xx or a connection error
    unfinished: int  # of those, unsent or unanswered when the drain ended (censored)
    achieved_qps: float  # 2xx responses completed inside the window, per second
    p50_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    first_error: str | None = None


def demo_body(seed: int = 0) -> bytes:
    """The demo service's request body: {"inputs": 8 rows of 256 floats}."""
    rng = random.Random(seed)
    rows = [[round(rng.random(), 6) for _ in range(DEMO_FEATURES)] for _ in range(DEMO_BATCH)]
    return json.dumps({"inputs": rows}).encode()


def poisson_schedule(rate_qps: float, span_s: float, seed: int = 0) -> np.ndarray:
    """Arrival offsets (s) in [0, span_s): a Poisson process at ``rate_qps`` conditioned on its count,
    i.e. round(rate x span) arrival times drawn uniformly and sorted (given the count, a Poisson process's
    arrivals are uniform order statistics). The gaps stay exponential-like; the realised rate is exact, so
    a short step's throughput is not judged against a count that chance made 10% higher."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.uniform(0.0, span_s, max(1, round(rate_qps * span_s))))


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int | None
    path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        try:
            parts = urlsplit(url)
            port = parts.port  # urllib checks the port's range only here
        except ValueError as exc:
            raise OpenLoopError(f"{url!r} is not a URL ({exc}); give e.g. http://127.0.0.1:8000/predict") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OpenLoopError(f"{url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000/predict")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port, path)

    def connect(self, timeout_s: float) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=timeout_s)


class _Step:
    """The shared state of one step: the schedule, the next arrival to claim, one slot per arrival."""

    def __init__(self, schedule: np.ndarray, t0: float, drain_end: float):
        self.due = (schedule + t0).tolist()
        self.done: list[float | None] = [None] * len(self.due)  # completion time of a 2xx answer
        self.failed = [False] * len(self.due)
        self.drain_end = drain_end
        self.next = 0
        self.first_error: str | None = None
        self.lock = threading.Lock()
        self.conns: list[http.client.HTTPConnection] = []  # closed at the drain's end: no worker outlives it

    def connect(self, ep: Endpoint, timeout_s: float) -> http.client.HTTPConnection:
        conn = ep.connect(timeout_s)
        with self.lock:
            self.conns.append(conn)
        return conn

    def close_all(self) -> None:
        """Cut every connection: a worker blocked on a server that trickles or never ends its body
        gets an error at once and ends (its request is censored at the drain's end)."""
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            sock = c.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its worker

    def claim(self) -> int | None:
        with self.lock:
            i = self.next
            if i >= len(self.due) or time.perf_counter() >= self.drain_end:
                return None
            self.next += 1
            return i

    def fail(self, i: int, why: str) -> None:
        self.failed[i] = True
        with self.lock:
            self.first_error = self.first_error or why


def _worker(step: _Step, ep: Endpoint, method: str, body: bytes | None, timeout_s: float) -> None:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn = step.connect(ep, timeout_s)
    try:
        while (i := step.claim()) is not None:
            wait = step.due[i] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                conn.request(method, ep.path, body, headers)
                resp = conn.getresponse()
                if len(resp.read(MAX_BODY + 1)) > MAX_BODY:  # an endless body: never buffered whole
                    raise http.client.HTTPException(f"response body over {MAX_BODY >> 20} MiB")
            except (OSError, http.client.HTTPException) as exc:
                if time.perf_counter() < step.drain_end:  # past it: cut by close_all, censored there
                    step.fail(i, f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = step.connect(ep, timeout_s)
                continue
            if time.perf_counter() >= step.drain_end:
                continue  # answered after the step ended: censored at its end, as if cut
            if 200 <= resp.status < 300:
                step.done[i] = time.perf_counter()
            else:
                step.fail(i, f"HTTP {resp.status} {resp.reason}")
    finally:
        conn.close()


def _summarise(step: _Step, rate_qps: float, win: tuple[float, float]) -> OpenLoopResult:
    start, end = win
    lat_ms, ok, errors, unfinished, completed = [], 0, 0, 0, 0
    for due, done, failed in zip(step.due, step.done, step.failed):
        if done is not None and start <= done < end:
            completed += 1
        if not start <= due < end:
            continue
        if failed:
            errors += 1
            continue
        if done is None:
            unfinished += 1
        else:
            ok += 1
        lat_ms.append(((done if done is not None else step.drain_end) - due) * 1e3)
    arr = np.asarray(lat_ms)
    p50, p99, mean = (float(np.percentile(arr, 50)), float(np.percentile(arr, 99)), float(arr.mean())) if arr.size \
        else (None, None, None)
    return OpenLoopResult(rate_qps, end - start, ok + errors + unfinished, ok, errors, unfinished,
                          completed / (end - start), p50, p99, mean, step.first_error)


def run_open_loop(url: str, rate_qps: float, duration_s: float, *, warmup_s: float = 1.0, drain_s: float = 1.0,
                  method: str = "POST", body: bytes | None = None, connections: int = 16, timeout_s: float = 10.0,
                  seed: int = 0) -> OpenLoopResult:
    """Offer ``rate_qps`` Poisson arrivals for ``warmup_s + duration_s``, then let the backlog drain for at
    most ``drain_s``. Statistics cover the arrivals after the warm-up. POST sends ``body`` (default: the
    demo's), GET sends none. Raises OpenLoopError for a bad URL or rate."""
    ep = Endpoint.parse(url)
    if not (rate_qps > 0 and duration_s > 0 and warmup_s >= 0 and drain_s >= 0 and connections >= 1):
        raise OpenLoopError("rate, step duration and connections must be positive; warm-up and drain >= 0")
    if method == "POST" and body is None:
        body = demo_body(seed)
    elif method != "POST":
        body = None
    t0 = time.perf_counter() + LEAD_S
    span = warmup_s + duration_s
    step = _Step(poisson_schedule(rate_qps, span, seed), t0, t0 + span + drain_s)
    threads = [threading.Thread(target=_worker, args=(step, ep, method, body, timeout_s), daemon=True,
                                name=f"openloop-{k}") for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:  # no later than the drain's end: a hostile server cannot hold the step
        t.join(max(0.0, step.drain_end - time.perf_counter()))
    step.close_all()
    for t in threads:
        t.join(JOIN_S)
    with step.lock:
        return _summarise(step, rate_qps, (t0 + warmup_s, t0 + span))


def run_until_stopped(url: str, rate_qps: float, stop: threading.Event, *, max_s: float = 3600.0,
                      body: bytes | None = None, connections: int = 16, timeout_s: float = 30.0,
                      seed: int = 0) -> OpenLoopResult:
    """Offer ``rate_qps`` Poisson arrivals (POST ``body``) until ``stop`` is set (or ``max_s``), then
    return at once: requests unanswered at that moment are censored there and counted as
    ``unfinished``; the worker threads (daemons) are left to end with the process, so the caller can
    exit without waiting for a slow server. Raises OpenLoopError for a bad URL or rate."""
    ep = Endpoint.parse(url)
    if not (rate_qps > 0 and max_s > 0 and connections >= 1):
        raise OpenLoopError("rate, duration and connections must be positive")
    t0 = time.perf_counter() + LEAD_S
    step = _Step(poisson_schedule(rate_qps, max_s, seed), t0, t0 + max_s)
    for k in range(connections):
        threading.Thread(target=_worker, args=(step, ep, "POST", body if body is not None else demo_body(seed),
                                               timeout_s), daemon=True, name=f"openloop-{k}").start()
    stop.wait(max_s)
    with step.lock:
        step.drain_end = end = max(t0 + 1e-3, time.perf_counter())
    step.close_all()
    with step.lock:
        return _summarise(step, rate_qps, (t0, end))


__all__ = ["Endpoint", "OpenLoopError", "OpenLoopResult", "demo_body", "poisson_schedule", "run_open_loop",
           "run_until_stopped"]

"""The demo's scenarios: each a realistic cause of a slow service, and the load that shows it. Data.

A scenario configures the served pipeline (diagnose/demo/server.py) and the open-loop load
(diagnose/demo/load.py): the offered Poisson rate and the client connections. The rate is relative:
``load`` times the capacity measured on this host just before the capture (diagnose/demo/runner.py),
because a fixed QPS saturates a slow or busy host and leaves a fast one idle (at fixed rates a quiet
2-core VM read 3 of 7 scenarios as no load). Nothing here says what diagnose should find: the
verdict comes from the capture's signals alone (the accuracy benchmark, benchmarks/accuracy.py,
holds the expected answers).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

MAX_QPS = 1000.0  # the most a demo's load may offer: the load generator plans every arrival up front (memory)


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str  # one line: what the service does that limits it
    load: float  # offered Poisson rate as a multiple of the measured capacity (1.0: as fast as it serves)
    connections: int  # client connections (the most requests in flight from the load generator)
    torch_threads: int  # torch intra-op threads in the service
    max_batch: int  # the model worker batches up to this many queued requests
    upstream: bool = False  # each request calls the slow local upstream service
    stream: bool = False  # the response is streamed token by token (LLM)
    serializer: str = "json"  # json (the standard library) or orjson, for the response body
    upstream_latency_ms: float = 15.0  # io: the slow upstream's own latency (diagnose/demo/upstream.py)
    fused_state: bool = False  # bandwidth: the state updated in place, no copy out (fewer bytes per item)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("service", "a serial pure-Python tokenizer and single-threaded JSON serialization of large "
             "payloads on the event loop, in front of one model worker queue", 1.2, 16, 1, 8),
    Scenario("compute", "large batched matmuls (a 1024-2048-2048-1024 MLP over 16 rows a request, "
             "batches of up to 16 requests) saturate the cores", 0.5, 16, 1, 16),
    Scenario("bandwidth", "memory-streaming tensor ops with little arithmetic: a residual update over a "
             "64 MiB state per batch (add, scale, copy), far bigger than any cache", 0.5, 16, 1, 8),
    Scenario("io", "each request waits on a slow upstream HTTP service (limited to 2 requests at a time) "
             "through a connection pool of 2", 0.55, 32, 1, 8, upstream=True),
    Scenario("unbatched", "one model worker runs batch-1 forwards of a wide MLP (1024-4096-4096-10, 15-40 ms "
             "each) under many concurrent clients: requests queue behind it", 1.5, 32, 1, 1),
    # llm: one connection, so its worker generates back to back with no queue in front of it (the
    # backlog waits in the client); with 8, any load that kept the worker busy queued requests behind it
    # as long as they were served, and the verdict read that queue (unbatched) or no load by turns
    Scenario("llm", "a small causal LM (random weights) generating token by token with a KV cache, "
             "streamed to the client one request at a time; TTFT and TPOT in gen_ai.* span attributes",
             1.0, 1, 1, 1, stream=True),
    Scenario("healthy", "well batched, fast serialization, offered well below capacity: nothing dominates",
             0.02, 8, 1, 16, serializer="orjson"),
)}
# ``diagnose demo --remedy``: the scenario with its first remedy applied (the same load), what it changes.
REMEDIES: dict[str, tuple[str, dict[str, object]]] = {
    "service": ("serialize the responses with orjson instead of json", {"serializer": "orjson"}),
    "unbatched": ("dynamic batching: the model worker batches up to 16 queued requests", {"max_batch": 16}),
    "io": ("fix the slow peer: the upstream answers in 5 ms instead of 15", {"upstream_latency_ms": 5.0}),
    "bandwidth": ("fuse the state update: update in place and read it there, no copy out", {"fused_state": True}),
}


def remedied(sc: Scenario) -> Scenario:
    """The scenario with its first remedy applied. Raises KeyError for a scenario without one."""
    return replace(sc, **REMEDIES[sc.name][1])  # type: ignore[arg-type]

DEFAULT_SCENARIO = "service"

__all__ = ["DEFAULT_SCENARIO", "MAX_QPS", "REMEDIES", "SCENARIOS", "Scenario", "remedied"]

"""The demo's scenarios: each a realistic cause of a slow service, and the load that shows it. Data.

A scenario configures the served pipeline (diagnose/demo/server.py) and the open-loop load
(diagnose/demo/load.py): the offered Poisson rate (QPS) and the client connections. Nothing here
says what diagnose should find: the verdict comes from the capture's signals alone (the accuracy
benchmark, benchmarks/accuracy.py, holds the expected answers).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str  # one line: what the service does that limits it
    qps: float  # offered load, Poisson arrivals per second
    connections: int  # client connections (the most requests in flight from the load generator)
    torch_threads: int  # torch intra-op threads in the service
    max_batch: int  # the model worker batches up to this many queued requests
    upstream: bool = False  # each request calls the slow local upstream service
    stream: bool = False  # the response is streamed token by token (LLM)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("service", "a serial pure-Python tokenizer and single-threaded JSON serialization of large "
             "payloads on the event loop, in front of one model worker queue", 300, 16, 1, 8),
    Scenario("compute", "large batched matmuls (a 1024-2048-2048-1024 MLP over 16 rows a request, "
             "batches of up to 16 requests) saturate the cores", 20, 16, 1, 16),
    Scenario("bandwidth", "memory-streaming tensor ops with little arithmetic: a residual update over a "
             "64 MiB state per batch (add, scale, copy), far bigger than any cache", 40, 16, 1, 8),
    Scenario("io", "each request waits on a slow upstream HTTP service (limited to 2 requests at a time) "
             "through a connection pool of 2", 60, 32, 1, 8, upstream=True),
    Scenario("unbatched", "one model worker runs batch-1 forwards of a wide MLP (1024-4096-4096-10, 15-40 ms "
             "each) under many concurrent clients: requests queue behind it", 300, 32, 1, 1),
    Scenario("llm", "a small causal LM (random weights) generating token by token with a KV cache, "
             "streamed to the client; TTFT and TPOT in gen_ai.* span attributes", 4, 8, 1, 1, stream=True),
    Scenario("healthy", "well batched, fast serialization, offered well below capacity: nothing dominates",
             15, 8, 1, 16),
)}
DEFAULT_SCENARIO = "service"

__all__ = ["DEFAULT_SCENARIO", "SCENARIOS", "Scenario"]

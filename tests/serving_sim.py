"""A serving engine's /metrics, for real: prometheus_client metrics under vLLM, SGLang, Triton and
TGI names, served by prometheus_client's own HTTP server on 127.0.0.1, updated by simulated requests.

Each step stands for one second of traffic and observes the same batch (``STEP``), so the values of
a window of n steps are known exactly (``truth``). ``warm_up`` observes other values before the
first scrape: a reader that does not take the window's difference sees them.
tests/record_serving_metrics.py records fixtures/serving-metrics from it; the live tests serve it.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LABELS = {"vllm": {"model_name": "Qwen/Qwen3-8B", "engine": "0"}, "sglang": {"model_name": "Qwen/Qwen3-8B"},
          "triton": {"model": "resnet50", "version": "1"}, "tgi": {}}


@dataclass(frozen=True)
class Step:
    """One second of traffic: (value, times) per histogram; increments per counter; gauges set per
    scrape from the cycles (index = scrape number - 1)."""

    observe: dict[str, tuple[tuple[float, int], ...]]
    inc: dict[str, float]


# canonical signal -> the names each engine exposes it under (counters without _total)
NAMES: dict[str, dict[str, str]] = {
    "vllm": {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
             "kv_usage": "vllm:kv_cache_usage_perc", "preemptions": "vllm:num_preemptions",
             "requests": "vllm:request_success", "prompt_tokens": "vllm:prompt_tokens",
             "output_tokens": "vllm:generation_tokens", "ttft": "vllm:time_to_first_token_seconds",
             "itl": "vllm:inter_token_latency_seconds", "tpot": "vllm:request_time_per_output_token_seconds",
             "queue": "vllm:request_queue_time_seconds", "prefill": "vllm:request_prefill_time_seconds",
             "decode": "vllm:request_decode_time_seconds", "e2e": "vllm:e2e_request_latency_seconds"},
    "sglang": {"running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs",
               "kv_usage": "sglang:token_usage", "requests": "sglang:num_requests",
               "prompt_tokens": "sglang:prompt_tokens", "output_tokens": "sglang:generation_tokens",
               "overlap_wait": "sglang:gpu_overlap_wait_seconds", "ttft": "sglang:time_to_first_token_seconds",
               "itl": "sglang:inter_token_latency_seconds", "queue": "sglang:queue_time_seconds",
               "e2e": "sglang:e2e_request_latency_seconds"},
    "triton": {"waiting": "nv_inference_pending_request_count", "requests": "nv_inference_request_success",
               "inferences": "nv_inference_count", "executions": "nv_inference_exec_count",
               "queue_total": "nv_inference_queue_duration_us",
               "compute_input_total": "nv_inference_compute_input_duration_us",
               "compute_infer_total": "nv_inference_compute_infer_duration_us",
               "compute_output_total": "nv_inference_compute_output_duration_us",
               "e2e_total": "nv_inference_request_duration_us"},
    "tgi": {"running": "tgi_batch_current_size", "waiting": "tgi_queue_size", "requests": "tgi_request_success",
            "tpot": "tgi_request_mean_time_per_token_duration", "queue": "tgi_request_queue_duration",
            "inference": "tgi_request_inference_duration", "e2e": "tgi_request_duration"},
}

# Per scrape (1, 2, 3, 4): running and waiting requests, KV-cache usage (0..1).
GAUGES: dict[str, dict[str, tuple[float, ...]]] = {
    "vllm": {"running": (4, 8, 8, 6), "waiting": (2, 5, 7, 4), "kv_usage": (0.90, 0.97, 0.99, 0.98)},
    "sglang": {"running": (16, 16, 14, 16), "waiting": (0, 1, 0, 1), "kv_usage": (0.40, 0.45, 0.50, 0.45)},
    "triton": {"waiting": (3, 3, 5, 1)},
    "tgi": {"running": (4, 4, 4, 4), "waiting": (10, 12, 14, 12)},
}

# Every latency engine: 20 requests a step. TTFT 8 x 40 ms, 8 x 80 ms, 4 x 200 ms; ITL 150 x 15 ms,
# 48 x 30 ms, 2 x 300 ms.
TTFT = ((0.04, 8), (0.08, 8), (0.2, 4))
ITL = ((0.015, 150), (0.03, 48), (0.3, 2))
STEPS: dict[str, Step] = {
    # queue 14 s of 35 s e2e a step (40%); 3 preemptions a step with the KV cache at 90-99%
    "vllm": Step({"ttft": TTFT, "itl": ITL, "tpot": ((0.02, 20),), "queue": ((0.9, 10), (0.5, 10)),
                  "prefill": ((0.3, 20),), "decode": ((0.45, 10), (0.55, 10)), "e2e": ((2.0, 10), (1.5, 10))},
                 {"preemptions": 3, "requests": 20, "prompt_tokens": 20 * 512, "output_tokens": 20 * 128}),
    # queue 2 s of 20 s e2e (10%); the GPU forward stream waits 0.25 s a second for the scheduler
    "sglang": Step({"ttft": TTFT, "itl": ITL, "queue": ((0.1, 20),), "e2e": ((1.0, 20),)},
                   {"requests": 20, "prompt_tokens": 20 * 256, "output_tokens": 20 * 64, "overlap_wait": 0.25}),
    # 50 requests of 2 inferences in 25 executions; queue 1.5 s of 5 s request time (30%)
    "triton": Step({}, {"requests": 50, "inferences": 100, "executions": 25, "queue_total": 1.5e6,
                        "compute_input_total": 0.25e6, "compute_infer_total": 3.0e6,
                        "compute_output_total": 0.25e6, "e2e_total": 5.0e6}),
    # queue 12 s of 20 s e2e (60%)
    "tgi": Step({"tpot": ((0.03, 10), (0.06, 10)), "queue": ((0.6, 20),), "inference": ((0.4, 20),),
                 "e2e": ((1.0, 20),)}, {"requests": 20}),
}
WARM_UP = Step({"ttft": ((2.0, 30),), "itl": ((2.0, 30),), "tpot": ((2.0, 30),), "queue": ((2.0, 30),),
                "e2e": ((4.0, 30),), "prefill": ((2.0, 30),), "decode": ((2.0, 30),), "inference": ((2.0, 30),)},
               {"preemptions": 40, "requests": 30, "prompt_tokens": 9000, "output_tokens": 9000,
                "overlap_wait": 9.0, "queue_total": 9e7, "e2e_total": 9e7, "inferences": 10, "executions": 10,
                "compute_input_total": 1e6, "compute_infer_total": 1e6, "compute_output_total": 1e6})


class _Swap:
    """A collector that serves whichever registry is current: an engine restart swaps in a fresh one."""

    def __init__(self, inner: CollectorRegistry):
        self.inner = inner

    def collect(self) -> Iterator[Any]:
        yield from self.inner.collect()


class Engine:
    """One simulated engine's metrics (a fresh registry per start), served over HTTP on 127.0.0.1."""

    def __init__(self, engine: str):
        self.engine = engine
        self.outer = CollectorRegistry()
        self.swap = _Swap(self._fresh())
        self.outer.register(self.swap)
        self.server: Any = None

    def _fresh(self) -> CollectorRegistry:
        reg = CollectorRegistry()
        lab = LABELS[self.engine]
        self.metrics: dict[str, Any] = {}
        for key, name in NAMES[self.engine].items():
            if key in GAUGES[self.engine]:
                m: Any = Gauge(name, f"{key} (simulated)", list(lab), registry=reg)
            elif key in ("ttft", "itl", "tpot", "queue", "prefill", "decode", "inference", "e2e"):
                m = Histogram(name, f"{key} (simulated)", list(lab), buckets=BUCKETS, registry=reg)
            else:
                m = Counter(name, f"{key} (simulated)", list(lab), registry=reg)
            self.metrics[key] = m.labels(**lab) if lab else m
        return reg

    def restart(self) -> None:
        """The engine restarted: every counter and histogram starts again from 0."""
        self.swap.inner = self._fresh()

    def apply(self, step: Step) -> None:
        for key, obs in step.observe.items():
            if key in self.metrics:
                for value, times in obs:
                    for _ in range(times):
                        self.metrics[key].observe(value)
        for key, by in step.inc.items():
            if key in self.metrics:
                self.metrics[key].inc(by)

    def set_gauges(self, scrape: int) -> None:
        for key, cycle in GAUGES[self.engine].items():
            self.metrics[key].set(cycle[(scrape - 1) % len(cycle)])

    def serve(self) -> str:
        """Start prometheus_client's HTTP server on 127.0.0.1 (a free port); returns the /metrics URL."""
        self.server, _thread = start_http_server(0, addr="127.0.0.1", registry=self.outer)
        return f"http://127.0.0.1:{self.server.server_port}/metrics"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class Live:
    """A served engine whose traffic runs on: a step every ``period_s``, and the gauges of scrape n
    from second n - 1 on (a thread stopped by ``close``)."""

    def __init__(self, engine: str, period_s: float = 0.25):
        import threading

        self.engine = Engine(engine)
        self.engine.apply(WARM_UP)
        self.engine.set_gauges(1)
        self.url = self.engine.serve()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period_s,), name="serving-sim", daemon=True)
        self._thread.start()

    def _run(self, period_s: float) -> None:
        import time

        t0 = time.monotonic()
        while not self._stop.wait(period_s):
            self.engine.apply(STEPS[self.engine.engine])
            self.engine.set_gauges(1 + int(time.monotonic() - t0))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.engine.close()


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving-metrics"


def recording(variant: str, edit: Callable[[str], str] = lambda text: text) -> tuple[list[dict], dict]:
    """A recording's scrapes as the collector's stream records (each page through ``edit`` first),
    and its index (engine, scrape times, truth)."""
    from diagnose.catalogs.serving_fields import read_page
    from diagnose.collectors.serving_metrics import scrape_record

    index = json.loads((FIXTURES / f"{variant}.json").read_text())
    records = [{"kind": "source", "engine": index["engine"], "url": f"fixture:{variant}"}]
    for s in index["scrapes"]:
        records.append(scrape_record(s["t_ns"], 0, read_page(edit((FIXTURES / s["file"]).read_text()))))
    return records, index


def window_s(index: dict) -> float:
    """Seconds from a recording's first scrape to its last."""
    return (index["scrapes"][-1]["t_ns"] - index["scrapes"][0]["t_ns"]) / 1e9


def truth(engine: str, steps: int) -> dict[str, Any]:
    """What ``steps`` steps of ``engine`` put into the window: counter increases, and per
    histogram the observations' count, sum and exact (not interpolated) P50/P99."""
    step = STEPS[engine]
    out: dict[str, Any] = {"counters": {k: v * steps for k, v in step.inc.items()}, "histograms": {}}
    for key, obs in step.observe.items():
        values = sorted(v for v, n in obs for _ in range(n * steps))
        out["histograms"][key] = {"count": len(values), "sum": sum(values),
                                  "p50": values[int(0.5 * len(values)) - 1],
                                  "p99": values[max(0, int(0.99 * len(values)) - 1)]}
    return out


__all__ = ["BUCKETS", "FIXTURES", "GAUGES", "NAMES", "STEPS", "WARM_UP", "Engine", "Live", "recording", "truth",
           "window_s"]

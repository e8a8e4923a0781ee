"""The metrics a comparison reads, declared once: the key users type in ``--fail-on``, the signal
that holds the capture's value (its unit and worse direction come from the signal catalogue,
diagnose/signals/catalog.py) and how its run-to-run noise is estimated.

Noise models (diagnose/compare/noise.py): ``latency`` (a percentile of the request latencies: a
bootstrap interval of the difference, and the spread of that percentile across windows of the
capture), ``rate`` (requests ended per window) and ``level`` (a sampled level: the means of its
readings per window); ``step_time`` and ``step_share`` (a torch trace's ProfilerSteps: the spread of
the per-step values, diagnose/compare/steps.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from diagnose.signals.catalog import Worse, spec_for


class Noise(str, Enum):
    LATENCY = "latency"
    RATE = "rate"
    LEVEL = "level"
    STEP_TIME = "step_time"  # a percentile of the ProfilerStep durations (compare/steps.py)
    STEP_SHARE = "step_share"  # the input pipeline's share of the steps (compare/steps.py)
    NONE = "none"  # no per-window data: only the two values are compared


@dataclass(frozen=True)
class MetricSpec:
    key: str  # as typed in --fail-on, e.g. "p99"
    label: str
    signal: str  # the catalogue's name of the capture's value
    noise: Noise
    percentile: float | None = None  # LATENCY: which percentile of the request latencies
    series: str | None = None  # LEVEL: which sampled series (diagnose/compare/samples.py SERIES)

    @property
    def unit(self) -> str:
        spec = spec_for(self.signal)
        return spec.unit if spec else ""

    @property
    def worse(self) -> Worse:
        spec = spec_for(self.signal)
        return spec.worse if spec else Worse.NEITHER


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("p50", "latency P50", "spans.p50_ms", Noise.LATENCY, 50.0),
    MetricSpec("p90", "latency P90", "spans.p90_ms", Noise.LATENCY, 90.0),
    MetricSpec("p99", "latency P99", "spans.p99_ms", Noise.LATENCY, 99.0),
    MetricSpec("p999", "latency P999", "spans.p999_ms", Noise.LATENCY, 99.9),
    MetricSpec("qps", "QPS", "spans.qps", Noise.RATE),
    MetricSpec("ttft_p99", "TTFT P99", "llm.ttft_p99_ms", Noise.NONE),
    MetricSpec("tpot_p99", "TPOT P99", "llm.tpot_p99_ms", Noise.NONE),
    MetricSpec("tokens_per_s", "output tokens/s", "llm.output_tokens_per_s", Noise.NONE),
    MetricSpec("in_flight", "in-flight connections (TCP)", "tcp.in_flight_mean", Noise.LEVEL, series="tcp_in_flight"),
    MetricSpec("cpu", "process CPU (100% = one core)", "cpu.process_util_pct", Noise.LEVEL, series="process_cpu_pct"),
    MetricSpec("sm", "GPU SM activity", "gpu.sm_active_pct", Noise.LEVEL, series="gpu_sm_pct"),
    MetricSpec("dram", "GPU DRAM activity", "gpu.dram_active_pct", Noise.LEVEL, series="gpu_dram_pct"),
    MetricSpec("gpu_util", "GPU-Util (NVML)", "gpu.kernel_busy_pct", Noise.LEVEL, series="gpu_util_pct"),
)
# Training steps of the torch traces, measured from the steps themselves (diagnose/compare/steps.py)
STEP_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("step_p50", "step time P50", "torch.step_time_p50_ms", Noise.STEP_TIME, 50.0),
    MetricSpec("step_p99", "step time P99", "torch.step_time_p50_ms", Noise.STEP_TIME, 99.0),
    MetricSpec("input_pipeline", "input pipeline share of the step (DataLoader)", "torch.dataloader_share_pct",
               Noise.STEP_SHARE),
)
BY_KEY = {m.key: m for m in (*METRICS, *STEP_METRICS)}

__all__ = ["BY_KEY", "METRICS", "STEP_METRICS", "MetricSpec", "Noise"]

"""The signal catalogue: every signal a source produces, declared once. Pure data, no I/O.

A ``SignalSpec`` holds a signal's unit, family (the part of the name before the first dot), the
signal source that produces it (``SIGNAL_SOURCES`` in diagnose/signals/__init__.py, by name:
``cpu`` = cpu_signals, ``gpu`` = gpu_signals, ``timeline`` = timeline_signals, ``serving`` =
serving_signals), the direction in
which its value gets worse for the service (``compare`` and ``plan`` read it) and where the number
comes from. Names with a bracketed key (``cpu.category_share_pct[serialization]``) are declared
once as a template, ``cpu.category_share_pct[{key}]``, with the keys the source can write; the
keys come from the catalogues in rules/ that the sources classify with.

``worse``: HIGHER for latencies, waits, idle time and overhead shares; LOWER for throughput and
for shares that should be high (compute share of the kernel window, overlap of collectives);
NEITHER for counts, context and resource load (SM activity, CPU utilisation rise with useful work
and with waste alike: compare them next to the throughput they bought).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from diagnose.bundle.streams import GC
from diagnose.catalogs.frames import ALL_CATEGORIES, PARKED, Category
from diagnose.catalogs.kernels import DEFAULT_CATEGORY, KERNEL_CATALOG, KernelGroup
from diagnose.catalogs.stages import STAGES, Stage
from diagnose.rules.base import Rule


class Worse(str, Enum):
    """The direction in which a signal's value gets worse for the service."""

    HIGHER = "higher"
    LOWER = "lower"
    NEITHER = "neither"


KEY = "{key}"


@dataclass(frozen=True)
class SignalSpec:
    """One declared signal, or one template of signals (``keys`` non-empty, ``name`` ends in
    ``[{key}]``). ``worse_by_key``: keys of a template whose direction differs from ``worse``."""

    name: str
    unit: str
    source: str
    worse: Worse
    description: str
    keys: tuple[str, ...] = ()
    worse_by_key: tuple[tuple[str, Worse], ...] = ()
    template: str | None = None  # set on a spec resolved from a template: the template's name

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def templated(self) -> bool:
        return bool(self.keys)

    @property
    def prefix(self) -> str:
        """A template's name up to its bracket: ``cpu.category_share_pct``."""
        return self.name.removesuffix(f"[{KEY}]")

    def names(self) -> tuple[str, ...]:
        """Every signal name this spec declares."""
        return tuple(f"{self.prefix}[{k}]" for k in self.keys) if self.keys else (self.name,)

    def key_of(self, name: str) -> str | None:
        """The key of ``name`` under this template, or None when the template does not declare it."""
        if not self.keys or not (name.startswith(self.prefix + "[") and name.endswith("]")):
            return None
        key = name[len(self.prefix) + 1:-1]
        return key if key in self.keys else None

    def resolve(self, name: str) -> SignalSpec:
        """The spec of one name of this template (its own direction and description)."""
        key = self.key_of(name)
        if key is None:
            raise KeyError(name)
        worse = dict(self.worse_by_key).get(key, self.worse)
        return replace(self, name=name, worse=worse, description=self.description.replace(KEY, key),
                       keys=(), worse_by_key=(), template=self.name)


H, L, N = Worse.HIGHER, Worse.LOWER, Worse.NEITHER
_CPU_CATEGORIES = tuple(c for c in ALL_CATEGORIES if c not in PARKED)
_KERNEL_CATEGORIES = tuple(p.category for p in KERNEL_CATALOG) + (DEFAULT_CATEGORY.category,)
_KERNEL_GROUPS = (KernelGroup.COMPUTE, KernelGroup.MEMORY, KernelGroup.COMMUNICATION)
# The framework's own compute is the work itself; every other category is overhead or waiting.
_WORK_CATEGORY = ((Category.FRAMEWORK_COMPUTE, N),)
PYSPY = "py-spy stacks (chrometrace windows)"
PROC = "process collector (psutil / /proc/<pid>)"
TORCH = "torch profiler trace (Kineto)"
SPANS = "OpenTelemetry spans (root span = request)"


def _cpu(name: str, unit: str, worse: Worse, description: str, keys: tuple[str, ...] = (),
         worse_by_key: tuple[tuple[str, Worse], ...] = ()) -> SignalSpec:
    return SignalSpec(name, unit, "cpu", worse, description, keys, worse_by_key)


def _gpu(name: str, unit: str, worse: Worse, description: str) -> SignalSpec:
    return SignalSpec(name, unit, "gpu", worse, description)


def _tl(name: str, unit: str, worse: Worse, description: str, keys: tuple[str, ...] = (),
        worse_by_key: tuple[tuple[str, Worse], ...] = ()) -> SignalSpec:
    return SignalSpec(name, unit, "timeline", worse, description, keys, worse_by_key)


_CPU: tuple[SignalSpec, ...] = (
    _cpu(f"cpu.category_share_pct[{KEY}]", "%", H,
         f"{PYSPY}, frames classified by catalogs/frames.py: share of non-idle sampled thread-time "
         f"in {KEY}", keys=_CPU_CATEGORIES, worse_by_key=_WORK_CATEGORY),
    _cpu("cpu.input_pipeline_share_pct", "%", H,
         f"{PYSPY}: share of non-idle sampled thread-time in a DataLoader's fetch on the training loop's thread "
         "or waiting for its workers (input_pipeline + input_wait; call paths of catalogs/frames.py)"),
    _cpu("cpu.idle_share_pct", "%", N, f"{PYSPY}: share of sampled thread-time parked waiting for work"),
    _cpu("stacks.sampled_s", "s", N, f"{PYSPY}: sampled thread-time over all windows"),
    _cpu("cpu.process_util_pct", "%", N, f"{PROC} cpu_times: process CPU utilisation, 100% = one core"),
    _cpu("cpu.cores_util_pct", "%", N, f"{PROC} cpu_times / logical CPUs: share of the host's cores used"),
    _cpu("cpu.busy_threads", "threads", N, f"{PROC} /proc/<pid>/task/*/stat: threads using >= 50% of a core"),
    _cpu("cpu.max_thread_util_pct", "%", H, f"{PROC} /proc/<pid>/task/*/stat: busiest thread's CPU, 100% = one core"),
    _cpu("cpu.python_util_pct", "%", N, f"{PROC} + py-spy: summed CPU of the threads py-spy saw (Python threads)"),
    _cpu("cpu.native_thread_cpu_share_pct", "%", N,
         f"{PROC} + py-spy: share of CPU in threads py-spy never saw (OpenMP/MKL/oneDNN workers)"),
    _cpu("cpu.process_demand_pct", "%", N,
         f"{PROC} schedstat: running + runnable-waiting time, 100% = one core (utilisation without schedstat)"),
    _cpu("cpu.max_thread_demand_pct", "%", H, f"{PROC} schedstat: the most demanding thread's run + run-queue time"),
    _cpu("cpu.runqueue_wait_pct", "%", H, f"{PROC} schedstat: share of CPU demand spent runnable, waiting for a core"),
    _cpu("cpu.ctx_switches_per_s", "1/s", N, f"{PROC} schedstat: timeslices per second over all threads"),
    _cpu("cpu.python_busy_pct", "%", H,
         f"{PROC} /proc/<pid>/task/*/stat: readings with a Python thread running or runnable "
         "(~100% = the GIL never idles)"),
    _cpu("cpu.children_util_pct", "%", N, f"{PROC} cpu_times of descendants (--subprocesses), 100% = one core"),
    _cpu("threads.blocked_io_share_pct", "%", H,
         f"{PROC} /proc/<pid>/task/*/stat state + wchan: share of work-in-progress readings blocked in IO"),
    _cpu("threads.blocked_lock_share_pct", "%", H,
         f"{PROC} /proc/<pid>/task/*/stat state + wchan: share of work-in-progress readings blocked on a lock/futex"),
    _cpu("threads.stopped_share_pct", "%", H, f"{PROC} /proc/<pid>/task/*/stat state T/t: readings stopped or traced"),
    _cpu("capture.target_alive_s", "s", N, "manifest end_reason, started_ns, ended_ns: how long the target lived "
         "into a capture it did not outlive"),
    _cpu("cpu.model_workers", "threads", N, f"{PYSPY}: threads with at least half of their samples in framework "
         "compute (torch/numpy): the model workers"),
    _cpu("tcp.in_flight_per_model_worker", "x", H, f"{PROC} accepted TCP connections per model-worker thread "
         "({PYSPY}): how many requests each worker has in front of it"),
    _cpu("tcp.in_flight_mean", "connections", N, f"{PROC} TCP scan: mean connections accepted on the "
         "target's listening TCP sockets (in-flight requests from outside; idle keep-alive ones count)"),
    _cpu("tcp.in_flight_max", "connections", N, f"{PROC} TCP scan: most connections accepted on the "
         "target's listening TCP sockets at one reading"),
    _cpu("sys.cpu_util_pct", "%", H, f"{PROC} psutil host cpu_times: host CPU busy (not idle, iowait or steal)"),
    _cpu("sys.iowait_pct", "%", H, f"{PROC} psutil host cpu_times: host iowait share"),
    _cpu("sys.steal_pct", "%", H, f"{PROC} psutil host cpu_times: steal share (hypervisor took the CPU)"),
    _cpu("io.read_bytes_per_s", "bytes/s", N, f"{PROC} psutil io_counters: bytes read per second"),
    _cpu("io.write_bytes_per_s", "bytes/s", N, f"{PROC} psutil io_counters: bytes written per second"),
    _cpu("mem.rss_max_bytes", "bytes", H, f"{PROC} psutil memory_info: peak resident set size"),
)

_ACTIVITY = "time-weighted over the capture, mean over the target's GPUs"
_GPU: tuple[SignalSpec, ...] = (
    _gpu("gpu.sm_active_pct", "%", N, f"SM activity: DCGM SM_ACTIVE / GPM SM_UTIL, {_ACTIVITY}"),
    _gpu("gpu.gr_engine_active_pct", "%", N,
         f"graphics engine activity: DCGM GR_ENGINE_ACTIVE / GPM GRAPHICS_UTIL, {_ACTIVITY}"),
    _gpu("gpu.sm_occupancy_pct", "%", N, f"SM occupancy: DCGM SM_OCCUPANCY / GPM SM_OCCUPANCY, {_ACTIVITY}"),
    _gpu("gpu.tensor_active_pct", "%", N,
         f"tensor pipe activity: DCGM PIPE_TENSOR_ACTIVE / GPM ANY_TENSOR_UTIL, {_ACTIVITY}"),
    _gpu("gpu.dram_active_pct", "%", N, f"DRAM activity: DCGM DRAM_ACTIVE / GPM DRAM_BW_UTIL, {_ACTIVITY}"),
    _gpu("gpu.fp16_active_pct", "%", N, f"FP16 pipe activity: DCGM PIPE_FP16_ACTIVE / GPM FP16_UTIL, {_ACTIVITY}"),
    _gpu("gpu.fp32_active_pct", "%", N, f"FP32 pipe activity: DCGM PIPE_FP32_ACTIVE / GPM FP32_UTIL, {_ACTIVITY}"),
    _gpu("gpu.kernel_busy_pct", "%", N,
         f"NVML utilization.gpu (DCGM GPU_UTIL): a kernel was running, not SM activity; {_ACTIVITY}"),
    _gpu("gpu.memory_busy_pct", "%", N,
         f"NVML utilization.memory (DCGM MEM_COPY_UTIL): device memory read or written; {_ACTIVITY}"),
    _gpu("gpu.target_sm_util_pct", "%", N,
         "NVML per-process SM utilisation of the target (nvmlDeviceGetProcessUtilization)"),
    _gpu("gpu.power_pct_of_limit", "%", N, "NVML power draw / enforced power limit (DCGM POWER_USAGE / limit)"),
    _gpu("gpu.sm_clock_pct_of_max", "%", L, "NVML SM clock / max SM clock while kernels run"),
    _gpu("gpu.throttled_share_pct", "%", H,
         "NVML clock-event reasons: share of readings with power cap, thermal or HW slowdown"),
    _gpu("gpu.mem_used_max_pct", "%", H,
         "NVML memory used / total (DCGM FB_USED / (FB_USED + FB_FREE)), max over the capture"),
    _gpu("gpu.temp_max_c", "degC", H, "NVML / DCGM GPU temperature, max over the capture and GPUs"),
    _gpu("gpu.pcie_tx_bytes_per_s", "bytes/s", N,
         "PCIe TX throughput: DCGM PCIE_TX_BYTES / GPM PCIE_TX_PER_SEC / NVML, summed over GPUs"),
    _gpu("gpu.pcie_rx_bytes_per_s", "bytes/s", N,
         "PCIe RX throughput: DCGM PCIE_RX_BYTES / GPM PCIE_RX_PER_SEC / NVML, summed over GPUs"),
    _gpu("gpu.nvlink_tx_bytes_per_s", "bytes/s", N,
         "NVLink TX throughput: DCGM NVLINK_TX_BYTES / GPM NVLINK_TOTAL_TX_PER_SEC, summed"),
    _gpu("gpu.nvlink_rx_bytes_per_s", "bytes/s", N,
         "NVLink RX throughput: DCGM NVLINK_RX_BYTES / GPM NVLINK_TOTAL_RX_PER_SEC, summed"),
    _gpu("gpu.count", "GPUs", N, "NVML compute-process lists (else every GPU seen): the target's GPUs"),
    _gpu("gpu.peak_bf16_flops_per_s", "FLOP/s", N, "catalogs/gpu_specs.py: dense BF16 peak of the target's GPU model"),
    _gpu("gpu.peak_mem_bytes_per_s", "bytes/s", N, "catalogs/gpu_specs.py: memory bandwidth of the target's GPU model"),
    _gpu("gpu.ridge_flop_per_byte", "FLOP/byte", N,
         "catalogs/gpu_specs.py: roofline ridge point, peak FLOP/s / bytes/s"),
    _gpu("gpu.dram_bytes_per_s_est", "bytes/s", N,
         "DRAM activity x the GPU model's peak bandwidth, per GPU (estimate)"),
)

_WINDOW = "share of the kernel window (first to last GPU event)"
_TIMELINE_GPU: tuple[SignalSpec, ...] = (
    _tl("gpu.idle_pct", "%", H, f"{TORCH}, HTA temporal breakdown: GPU idle, {_WINDOW}"),
    _tl("gpu.compute_pct", "%", L, f"{TORCH}, HTA temporal breakdown: compute kernels, {_WINDOW}"),
    _tl("gpu.non_compute_pct", "%", H, f"{TORCH}, HTA temporal breakdown: memcpy/memset/collectives only, {_WINDOW}"),
    _tl("gpu.idle_gap_share", "%", H, f"{TORCH}: idle gaps >= timeline:gpu_gap_min_us (default 100 us), {_WINDOW}"),
    _tl("gpu.short_gap_idle_pct", "%", H,
        f"{TORCH}: idle in gaps shorter than the idle-gap threshold (launch overhead), {_WINDOW}"),
    _tl("gpu.kernel_window_pct", "%", N, f"{TORCH}: the kernel window as a share of the profiled host time"),
    _tl("gpu.idle_host_wait_pct", "%", H,
        f"{TORCH}, HTA idle-time breakdown: per-stream idle where the launch came after the previous "
        "kernel ended (host wait)"),
    _tl("gpu.comm_overlap_pct", "%", L,
        f"{TORCH}, HTA comm/comp overlap: collective-kernel time with a compute kernel running too"),
    _tl("gpu.comm_exposed_pct", "%", H, f"{TORCH}: collective-kernel time with no compute kernel beside it, {_WINDOW}"),
    _tl("gpu.comm_exposed_ms", "ms", H, f"{TORCH}: collective-kernel time with no compute kernel beside it"),
    _tl("gpu.straggler_lag_ms", "ms", H,
        f"{TORCH} of several ranks: the latest straggler's collective/step start after the median rank's (0: none)"),
    _tl("gpu.sync_skew_pct", "%", H,
        f"{TORCH} of several ranks: matched collectives' time spent waiting for the last rank to arrive"),
    _tl("kernels.short_kernel_pct", "%", H,
        f"{TORCH}: kernels shorter than timeline:short_kernel_max_us (default 10 us)"),
    _tl("kernels.launch_delay_p99_us", "us", H,
        f"{TORCH}, CUPTI correlation: P99 of launch call start -> kernel start"),
    _tl(f"kernels.group_share_pct[{KEY}]", "%", N,
        f"{TORCH}: summed GPU event time in the {KEY} group of catalogs/kernels.py", keys=_KERNEL_GROUPS),
    _tl(f"kernels.category_share_pct[{KEY}]", "%", N,
        f"{TORCH}: summed GPU event time in the {KEY} category of catalogs/kernels.py", keys=_KERNEL_CATEGORIES),
    _tl("kernels.fp32_flops_pct", "%", H,
        f"{TORCH} (record_shapes): FLOPs of ops with float32/float64 inputs, of FLOPs of known precision"),
    _tl("kernels.intensity_flop_per_byte", "FLOP/byte", N,
        f"{TORCH} (record_shapes): arithmetic intensity, FLOPs / bytes read+written (upper bound)"),
    _tl("kernels.low_intensity_time_pct", "%", N,
        f"{TORCH} (record_shapes): time of op calls below 1 FLOP/byte (memory-bound on any CPU), of op calls "
        "with FLOPs"),
    _tl("kernels.intensity_to_ridge_ratio", "x", N,
        f"{TORCH}: arithmetic intensity / roofline ridge of catalogs/gpu_specs.py (< 1: below the ridge)"),
)

_TIMELINE_HOST: tuple[SignalSpec, ...] = (
    _tl("torch.sync_blocked_pct", "%", H, f"{TORCH}: host time in cuda*/hip*Synchronize and blocking copies"),
    _tl("torch.h2d_pageable_pct", "%", H, f"{TORCH}: Memcpy HtoD from pageable host memory, {_WINDOW}"),
    _tl("torch.d2h_pageable_copies", "copies", H,
        f"{TORCH}: Memcpy DtoH into pageable host memory (each blocks the host)"),
    _tl("torch.model_batch_p50", "items", L, f"{TORCH}: median leading dimension of input 0 of matmul/linear/conv "
        "ops (record_shapes): the batch the model ran"),
    _tl("torch.step_time_p50_ms", "ms", H, f"{TORCH}: P50 of ProfilerStep#N durations"),
    _tl("torch.dataloader_share_pct", "%", H,
        f"{TORCH}: DataLoader annotations inside ProfilerSteps, share of step time"),
    _tl("torch.training_ops_pct", "%", N,
        f"{TORCH}: host time in autograd backward and Optimizer.step/zero_grad (training vs serving)"),
    _tl("torch.op_idle_pct", "%", H, f"{TORCH}, CPU-only trace: share of the profiled window with no torch op running"),
    _tl("torch.op_idle_gap_share", "%", H,
        f"{TORCH}, CPU-only trace: gaps >= timeline:torch_op_gap_min_us with no torch op"),
    _tl("torch.host_comm_pct", "%", H,
        f"{TORCH}, CPU-only trace: share of the profiled window in host collectives (gloo/MPI) with no torch op"),
)

_SPANS: tuple[SignalSpec, ...] = (
    *(_tl(f"spans.{q}_ms", "ms", H, f"{SPANS}: {label} of request latency")
      for q, label in (("p50", "P50"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99"), ("p999", "P999"),
                       ("mean", "mean"))),
    _tl("spans.qps", "1/s", L, f"{SPANS}: QPS, requests ended per second of the capture window"),
    _tl("spans.requests", "requests", N, f"{SPANS}: requests (root spans) in the capture"),
    _tl("spans.in_flight_mean", "requests", N, f"{SPANS}: time-average of in-flight requests (sweep of starts/ends)"),
    _tl("spans.in_flight_littles_law", "requests", N,
        f"{SPANS}: in-flight requests by Little's law, QPS x mean latency"),
    _tl(f"spans.stage_share_pct[{KEY}]", "%", N,
        f"{SPANS}: time the {KEY} stage (catalogs/stages.py) was open inside requests / request time",
        keys=STAGES, worse_by_key=((Stage.QUEUE, H),)),
    _tl("spans.tail_gc_overlap_pct", "%", H,
        f"{SPANS} + {GC.name}: share of the slowest 1% of requests overlapping a GC pause"),
    _tl("spans.tail_gc_overlap_excess_pct", "%", H,
        f"{SPANS} + {GC.name}: share of the slowest 1% overlapping a GC pause minus the share of all requests "
        "(percentage points: the tail's excess over any request)"),
    *(_tl(f"llm.{m}_{q}_ms", "ms", H, f"{SPANS}, gen_ai attributes / first-token events: {q.upper()} of {m.upper()} "
          f"({'time to first token' if m == 'ttft' else 'time per output token'})")
      for m in ("ttft", "tpot") for q in ("p50", "p99")),
    _tl("llm.ttft_share_pct", "%", N, f"{SPANS}, gen_ai TTFT: share of generation time before the first token "
        "(queue + prefill)"),
    _tl("llm.decode_share_pct", "%", N, f"{SPANS}, gen_ai TTFT: share of generation time after the first token "
        "(decode)"),
    _tl("llm.output_tokens_per_s", "tokens/s", L,
        f"{SPANS}, gen_ai.usage.output_tokens: TPS, output tokens per second"),
)

_JOIN = "py-spy samples on the Unix clock inside"
_TIMELINE_JOIN: tuple[SignalSpec, ...] = (
    _tl("join.gap_busy_thread_pct", "%", N,
        f"{_JOIN} GPU (or torch-op) idle gaps: the busiest thread's non-idle share"),
    _tl(f"join.gap_category_share_pct[{KEY}]", "%", N,
        f"{_JOIN} GPU (or torch-op) idle gaps: share of non-idle thread-time in {KEY} (catalogs/frames.py)",
        keys=_CPU_CATEGORIES),
    _tl("join.slow_busy_thread_pct", "%", N,
        f"{_JOIN} the slowest 1% of requests (else steps >= P90): the busiest thread's non-idle share"),
    _tl(f"join.slow_category_share_pct[{KEY}]", "%", N,
        f"{_JOIN} the slowest requests/steps: share of non-idle thread-time in {KEY} (catalogs/frames.py)",
        keys=_CPU_CATEGORIES),
)

ENGINE = "serving engine /metrics (vLLM, SGLang, Triton, TGI; catalogs/serving_fields.py)"
_QUANT = "bucket-interpolated from the histogram's increase over the capture window"
_LATENCY_NAMES = {"ttft": "TTFT (request arrival to first output token)",
                  "itl": "ITL (gap between consecutive output tokens of a request)",
                  "tpot": "TPOT ((e2e - TTFT) / (output tokens - 1), per request)",
                  "e2e": "end-to-end request latency", "queue": "time requests waited in the engine's queue"}


def _sv(name: str, unit: str, worse: Worse, description: str) -> SignalSpec:
    return SignalSpec(name, unit, "serving", worse, f"{ENGINE}: {description}")


_SERVING: tuple[SignalSpec, ...] = (
    *(_sv(f"serving.{k}_{q}_ms", "ms", H, f"{q.upper()} of {label}, {_QUANT}")
      for k, label in _LATENCY_NAMES.items() for q in ("p50", "p99")),
    _sv("serving.queue_share_pct", "%", H, "queue time / end-to-end latency summed over the window's requests "
        "(increase of the histograms' _sum; Triton: of its cumulative duration counters)"),
    *(_sv(f"serving.{g}_{s}", "requests", N, f"{what}, {s} of the 1 s scrapes")
      for g, what in (("in_flight", "requests in the engine (running + waiting)"),
                      ("running", "requests running in the engine's batch"),
                      ("waiting", "requests waiting in the engine's queue")) for s in ("mean", "max")),
    _sv("serving.kv_cache_usage_mean_pct", "%", H, "KV-cache usage (vLLM kv_cache_usage_perc, SGLang token_usage), "
        "mean of the scrapes"),
    _sv("serving.kv_cache_usage_max_pct", "%", H, "KV-cache usage, max of the scrapes (the fullest engine)"),
    _sv("serving.preemptions", "preemptions", H, "requests preempted (KV cache full), increase over the window"),
    _sv("serving.preemptions_per_s", "1/s", H, "requests preempted per second of the window"),
    _sv("serving.qps", "1/s", L, "requests finished per second (increase of the success counter / window)"),
    _sv("serving.prompt_tokens_per_s", "tokens/s", N, "prompt tokens prefilled per second"),
    _sv("serving.output_tokens_per_s", "tokens/s", L, "TPS, output tokens generated per second"),
    _sv("serving.gpu_overlap_wait_pct", "%", H, "SGLang gpu_overlap_wait_seconds: the GPU forward stream idle "
        "while the CPU scheduler prepares the next batch, share of the window (mean over ranks)"),
)

SPECS: tuple[SignalSpec, ...] = _CPU + _GPU + _TIMELINE_GPU + _TIMELINE_HOST + _SPANS + _TIMELINE_JOIN + _SERVING
CATALOG: dict[str, SignalSpec] = {s.name: s for s in SPECS}
_TEMPLATES: dict[str, SignalSpec] = {s.prefix: s for s in SPECS if s.templated}


def spec_for(name: str) -> SignalSpec | None:
    """The spec of signal ``name``; a templated name resolves to its own spec (``template`` set).
    None when the name is not declared (a misspelt name, or a key the template does not hold)."""
    spec = CATALOG.get(name)
    if spec is not None and not spec.templated:
        return spec
    template = _TEMPLATES.get(name.split("[", 1)[0]) if name.endswith("]") else None
    return template.resolve(name) if template is not None and template.key_of(name) else None


def unit_of(name: str) -> str:
    """The declared unit of ``name``. Raises KeyError for an undeclared name."""
    spec = spec_for(name)
    if spec is None:
        raise KeyError(f"signal {name!r} is not declared in diagnose/signals/catalog.py")
    return spec.unit


def declared_names() -> tuple[str, ...]:
    """Every declared signal name, templates expanded."""
    return tuple(n for s in SPECS for n in s.names())


def rule_signals(rule: Rule) -> tuple[str, ...]:
    """The signals a rule reads: its conditions, then its ``unless`` entries."""
    unless = (c for entry in rule.unless for c in (entry if isinstance(entry, tuple) else (entry,)))
    return tuple(dict.fromkeys([c.signal for c in rule.conditions] + [c.signal for c in unless]))


def undeclared_rule_signals(rules: Iterable) -> list[str]:
    """``"<rule id>: <signal>"`` for every signal a rule reads that the catalogue does not declare."""
    return [f"{r.id}: {name}" for r in rules for name in rule_signals(r) if spec_for(name) is None]


__all__ = ["CATALOG", "SPECS", "SignalSpec", "Worse", "declared_names", "rule_signals", "spec_for",
           "undeclared_rule_signals", "unit_of"]

"""GPU rules: compute-bound vs bandwidth-bound vs "the GPU is mostly waiting".

Thresholds follow NVIDIA's DCGM guidance (DCGM user guide, "Profiling metrics"): SM activity
>= 0.8 is needed for effective use and < 0.5 indicates ineffective use; DRAM activity of ~0.8 is
the practical ceiling of the memory interface. NVML's ``utilization.gpu`` (gpu.kernel_busy_pct)
only says a kernel was running: it is high for a GPU that runs one tiny kernel at a time, so it
is read only against the graphics-engine and DRAM activity, never as "busy" on its own.

A bandwidth-bound kernel keeps warps resident on every SM while they wait for memory, so SM
activity alone does not make a workload compute-bound: the compute rules require the DRAM
interface to be far from its ceiling, or the tensor pipes to be busy.
"""
from diagnose.model import Layer, Quadrant, Severity
from diagnose.rules.base import Condition, Rule, Unless

Q, L, S = Quadrant, Layer, Severity

COMPUTE_ACTIONS = (
    "Make each token/sample cheaper: FP8/INT8 quantization, a distilled or smaller model",
    "Then the engine: fused kernels (FlashAttention), torch.compile or TensorRT",
    "Then capacity: more or faster GPUs for this model size",
)
BANDWIDTH_ACTIONS = (
    "Move fewer bytes per result: weight-only INT8/INT4 or FP8 quantization, KV-cache quantization",
    "Raise arithmetic intensity: larger batches (continuous batching), fused elementwise kernels",
    "Then the engine: torch.compile / TensorRT fusion, paged attention for decode",
)
# The same quadrants in a training loop (rules/base.py TRAINING): no quantized serving or decode.
TRAINING_COMPUTE_ACTIONS = (
    "Cheaper math per step: bf16 autocast, FP8 training (Transformer Engine) on Hopper and later",
    "Then the engine: fused attention (SDPA/FlashAttention), torch.compile",
    "Then capacity: more GPUs (data, tensor or pipeline parallel)",
)
TRAINING_BANDWIDTH_ACTIONS = (
    "Fuse elementwise chains (torch.compile, fused norms, fused/foreach optimizers)",
    "Keep activations and gradients in bf16 (autocast) so each step moves fewer bytes",
    "Raise the micro-batch so each weight byte read serves more samples",
)


def _waiting(kernel: float = 50.0) -> tuple[Condition, ...]:
    return (Condition("gpu.kernel_busy_pct", ">=", kernel, 40.0),
            Condition("gpu.gr_engine_active_pct", "<=", 40.0, 30.0),
            Condition("gpu.dram_active_pct", "<=", 30.0, 25.0))


# A kernel-timeline verdict needs the kernels to span a fair part of what was profiled: one 45 us
# GEMM in a 413 ms step (backward_thread.json) is "0% idle" but says nothing about the GPU.
KERNEL_WINDOW_COVERS = Condition("gpu.kernel_window_pct", ">=", 25.0, 0.0)

# The GPU itself did work most of the time: host CPU time then feeds or waits on it and is not what
# holds the system back. SM activity >= 60% or DRAM activity >= 50% (DCGM profiling metrics; < 50%
# SM activity is "ineffective use"), or GPU idle <= 10% of a kernel window that covers a fair part
# of the trace (torch profiler).
# Seen on an H200 (fixtures/gpu/bandwidth-copy-gather): a copy/gather loop kept one core at 100%,
# spinning on a full launch queue, while DRAM was 62% active. NVML's GPU-Util is not evidence.
GPU_BUSY: tuple[Unless, ...] = (
    Condition("gpu.sm_active_pct", ">=", 60.0, 0.0),
    Condition("gpu.dram_active_pct", ">=", 50.0, 0.0),
    (Condition("gpu.idle_pct", "<=", 10.0, 0.0), KERNEL_WINDOW_COVERS),
)
GPU_BUSY_REASON = "the GPU is the busy side, and this CPU time feeds it or waits for it"

WAITING = ("GPU-Util {0:.0f}% while graphics-engine activity {1:.0f}% and DRAM activity {2:.0f}%: "
           "the GPU is mostly waiting, not busy.")

GPU_RULES: tuple[Rule, ...] = (
    Rule(
        "compute.gpu_tensor_busy", "Tensor cores are the limit (compute-bound)", Q.COMPUTE, L.MODEL, S.CRITICAL,
        (Condition("gpu.tensor_active_pct", ">=", 60.0, 30.0),),
        "The tensor pipes were active {0:.0f}% of cycles: the GPU's math units are saturated.",
        COMPUTE_ACTIONS, training_suggestions=TRAINING_COMPUTE_ACTIONS,
    ),
    Rule(
        "compute.gpu_sms_saturated", "The GPU's SMs are saturated (compute-bound)", Q.COMPUTE, L.MODEL, S.CRITICAL,
        (Condition("gpu.sm_active_pct", ">=", 80.0, 15.0),
         Condition("gpu.dram_active_pct", "<=", 50.0, 40.0)),
        "SMs were active {0:.0f}% of the time while the DRAM interface was only {1:.0f}% busy: "
        "the work is limited by compute, not memory bandwidth.",
        COMPUTE_ACTIONS, training_suggestions=TRAINING_COMPUTE_ACTIONS,
    ),
    Rule(
        "bandwidth.gpu_dram_saturated", "GPU memory bandwidth is the limit", Q.BANDWIDTH, L.MODEL, S.CRITICAL,
        (Condition("gpu.dram_active_pct", ">=", 55.0, 25.0),
         Condition("gpu.tensor_active_pct", "<=", 50.0, 40.0)),
        "The DRAM interface was active {0:.0f}% of cycles (practical ceiling ~80%) while the tensor "
        "pipes ran only {1:.0f}%: kernels wait on memory, not on math.",
        BANDWIDTH_ACTIONS, training_suggestions=TRAINING_BANDWIDTH_ACTIONS,
    ),
    Rule(
        "service.gpu_waiting_on_host", "The GPU is mostly waiting on the busy host", Q.SERVICE, L.SERVICE, S.CRITICAL,
        _waiting() + (Condition("cpu.process_util_pct", ">=", 60.0, 40.0),),
        WAITING + " The target's CPU meanwhile ran at {3:.0f}% of a core: the host side (Python, "
        "serialization, scheduling) does not feed the GPU fast enough.",
        ("Batch requests (dynamic/continuous batching) so each launch carries more work",
         "Take Python off the launch path: CUDA graphs, torch.compile(mode='reduce-overhead')",
         "Overlap host work with the GPU: pre/post-processing in worker processes, pinned-memory async copies"),
        training_suggestions=(
            "Input work into DataLoader workers (num_workers>0, pin_memory=True, non_blocking copies)",
            "Take Python off the launch path: CUDA graphs, torch.compile(mode='reduce-overhead')",
            "Drop per-step .item()/.cpu() syncs so the host can queue the next kernels"),
    ),
    Rule(
        "io.gpu_and_host_waiting", "The GPU and the host both wait (IO-bound)", Q.IO, L.SYSTEM, S.CRITICAL,
        _waiting() + (Condition("cpu.process_util_pct", "<=", 60.0, 40.0),),
        WAITING + " The target's CPU was only at {3:.0f}% of a core: both wait, on disk, network or a peer.",
        ("Find what the threads wait on (see the thread table) and prefetch it: DataLoader workers, "
         "pinned memory, async reads",
         "Cache inputs locally; move data to faster storage"),
    ),
    Rule(
        "service.gpu_small_kernels", "Kernels too small to fill the GPU", Q.SERVICE, L.SERVICE, S.WARNING,
        (Condition("gpu.gr_engine_active_pct", ">=", 60.0, 30.0),
         Condition("gpu.sm_active_pct", "<=", 50.0, 30.0)),
        "The graphics engine was busy {0:.0f}% of the time but only {1:.0f}% of the SMs on average: "
        "each kernel is too small to occupy the GPU (small batches, per-item launches).",
        ("Batch requests so each kernel covers more data",
         "Fuse small kernels: torch.compile, CUDA graphs"),
        training_suggestions=("Raise the micro-batch so each kernel covers more data",
                              "Fuse small kernels: torch.compile, CUDA graphs"),
    ),
    Rule(
        "secondary.gpu_fp32_math", "SMs are busy but the tensor cores idle", None, L.ENGINE, S.WARNING,
        (Condition("gpu.sm_active_pct", ">=", 80.0, 15.0),
         Condition("gpu.tensor_active_pct", "<=", 10.0, 10.0),
         Condition("gpu.dram_active_pct", "<=", 50.0, 40.0)),
        "SMs were active {0:.0f}% but the tensor pipes only {1:.0f}% (DRAM {2:.0f}%, so not waiting on "
        "memory): the math runs on FP32 CUDA cores.",
        ("Run matmuls in bf16/fp16 (torch.autocast) or allow TF32 (torch.backends.cuda.matmul.allow_tf32)",),
    ),
    Rule(
        "secondary.gpu_throttled", "GPU clocks were held down", None, L.SYSTEM, S.WARNING,
        (Condition("gpu.throttled_share_pct", ">=", 20.0, 50.0),),
        "A power or thermal limit held the GPU clocks down {0:.0f}% of the time: measured speeds "
        "understate what the hardware can do.",
        ("Check cooling and the power limit (nvidia-smi -q -d PERFORMANCE); do not compare runs "
         "taken at different clocks",),
    ),
)

__all__ = ["GPU_RULES"]

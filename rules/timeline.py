"""Rules on the kernel timeline, span analytics and the cross-source join.

Thresholds: GPU idle >= 30% of the kernel window with most of it host wait is HTA's "GPU starved by
the host" signature; compute kernels >= 60% of GPU time with the GPU busy >= 70% is compute-bound
(change the model first); memory-group kernels >= 60% with a busy GPU is bandwidth-bound; a stage
holding >= 30% of request time is the first place to act (queueing: service layer; network/db:
system layer).
"""
from diagnose.model import Layer, Quadrant, Severity
from diagnose.rules.base import Condition, Rule
from diagnose.rules.gpu import GPU_BUSY, KERNEL_WINDOW_COVERS, TRAINING_BANDWIDTH_ACTIONS, TRAINING_COMPUTE_ACTIONS

Q, L, S = Quadrant, Layer, Severity

# Most profiled FLOPs run in ops with float32 inputs: their ridge (and peak) is far below the BF16
# tensor-core one of catalogs/gpu_specs.py (H100/H200 SXM: 67 TFLOP/s FP32 vs 989 BF16, datasheets).
MOSTLY_FP32 = Condition("kernels.fp32_flops_pct", ">=", 50.0, 40.0)

# The host does feed the GPU late, but during the gaps its busiest thread mostly waited in socket or
# file reads: the input source, not host CPU work, is the limit (an IO verdict instead).
GAPS_IN_IO: tuple[Condition, ...] = (Condition("join.gap_category_share_pct[io_wait]", ">=", 40.0, 0.0),)

TIMELINE_RULES: tuple[Rule, ...] = (
    Rule(
        "service.gpu_starved_by_host", "The GPU waits for the host (kernel timeline)", Q.SERVICE, L.SERVICE,
        S.CRITICAL,
        (Condition("gpu.idle_pct", ">=", 30.0, 40.0), Condition("gpu.idle_host_wait_pct", ">=", 60.0, 30.0)),
        "The GPU was idle {0:.0f}% of the kernel window and {1:.0f}% of that idle time the next kernel "
        "had not even been launched: the host does not feed the GPU fast enough.",
        ("Find what the host does in the gaps (see 'GPU idle gaps'): move pre/post-processing and "
         "tokenization off the launching thread, pipelined with the model",
         "Batch requests so each launch carries more work; overlap input copies (pinned memory, non_blocking)",
         "Then the engine: CUDA graphs / torch.compile to cut per-kernel launch cost"),
        training_suggestions=(
            "Find what the host does in the gaps (see 'GPU idle gaps' and the DataLoader share): a slow "
            "input pipeline wants DataLoader(num_workers>0, persistent_workers=True, prefetch_factor); "
            "Python dispatch in forward/backward/optimizer wants torch.compile or CUDA graphs and a fused "
            "optimizer (fused=True)",
            "Overlap input copies with compute (pin_memory=True, .to(device, non_blocking=True)); drop "
            "per-step .item()/.cpu() calls that drain the launch queue",
            "Raise the micro-batch so each launch carries more work"),
        unless=GAPS_IN_IO, unless_reason="during the gaps the threads wait on reads: the input source is the limit",
    ),
    Rule(
        "service.gpu_gaps_host_busy", "During GPU idle gaps the host threads are busy", Q.SERVICE, L.SERVICE,
        S.WARNING,
        (Condition("gpu.idle_gap_share", ">=", 20.0, 40.0), Condition("join.gap_busy_thread_pct", ">=", 60.0, 35.0)),
        "{0:.0f}% of the kernel window is in idle gaps, during which the busiest Python thread was busy "
        "{1:.0f}% of its samples: CPU work on the critical path keeps the GPU waiting.",
        ("Parallelise or vectorise the work the join names (tokenizer, image decode, JSON)",
         "Run it in worker processes ahead of the model (a queue of ready batches)"),
        training_suggestions=(
            "Move the work the join names into DataLoader worker processes (num_workers>0) or onto the "
            "GPU (torchvision.transforms.v2 on device, DALI)",
            "Vectorise what stays in the training loop (no per-sample Python)"),
        unless=GAPS_IN_IO, unless_reason="during the gaps the threads wait on reads: the input source is the limit",
    ),
    Rule(
        "io.gpu_gaps_host_waiting", "GPU and host threads wait at the same time", Q.IO, L.SYSTEM, S.WARNING,
        (Condition("gpu.idle_gap_share", ">=", 20.0, 40.0), Condition("join.gap_busy_thread_pct", "<=", 30.0, 30.0)),
        "{0:.0f}% of the kernel window is in idle gaps while the busiest Python thread was busy only "
        "{1:.0f}% of its samples: both wait on something outside (IO, network, another process).",
        ("Check what the threads block on during the gaps (socket/file reads in the join's stacks)",
         "Prefetch inputs, use async IO, keep connections alive"),
    ),
    Rule(
        "io.gpu_gaps_host_in_io", "During GPU idle gaps the host waits on reads", Q.IO, L.SYSTEM, S.CRITICAL,
        (Condition("gpu.idle_gap_share", ">=", 20.0, 40.0),
         Condition("join.gap_category_share_pct[io_wait]", ">=", 40.0, 40.0)),
        "{0:.0f}% of the kernel window is in idle gaps, and during them {1:.0f}% of the threads' "
        "active samples were blocked in socket or file reads: the input source starves the GPU.",
        ("Prefetch: read the next batch in a background thread/process while the GPU runs this one",
         "Move inputs closer (local disk or page cache instead of the network), read in large blocks",
         "Then the service: more concurrent requests in flight, so one slow read does not idle the GPU"),
        training_suggestions=(
            "Prefetch: DataLoader(num_workers>0, prefetch_factor>=2) reads the next batches while the GPU "
            "runs this one",
            "Move the dataset closer (local NVMe or page cache instead of network storage), stored in "
            "large sequential shards rather than one small file per sample"),
    ),
    Rule(
        "service.torch_starved_on_cpu", "The model waits for Python pre/post-processing (CPU)", Q.SERVICE,
        L.SERVICE, S.WARNING,
        (Condition("torch.op_idle_gap_share", ">=", 30.0, 40.0),
         Condition("join.gap_busy_thread_pct", ">=", 60.0, 35.0)),
        "No torch op ran in {0:.0f}% of the profiled window (in gaps of at least the torch-op gap "
        "minimum, 1 ms by default) while the busiest Python "
        "thread was busy {1:.0f}% of its samples there: Python code between model calls dominates.",
        ("Batch requests so the model runs on more items per call",
         "Move the Python work the join names to worker processes or vectorised/native code"),
        training_suggestions=(
            "Move the Python work the join names into DataLoader workers or vectorised/native code",
            "Raise the per-step batch (or accumulate gradients) so each Python iteration drives more GPU work"),
        unless=GAPS_IN_IO, unless_reason="during the gaps the threads wait on reads: the input source is the limit",
    ),
    Rule(
        "compute.gpu_compute_kernels", "GEMM/conv/attention kernels keep the GPU busy", Q.COMPUTE, L.MODEL,
        S.WARNING,
        (Condition("gpu.compute_pct", ">=", 70.0, 25.0),
         Condition("kernels.group_share_pct[compute]", ">=", 60.0, 35.0), KERNEL_WINDOW_COVERS),
        "Kernels other than communication and memory copies (HTA's compute) run {0:.0f}% of the kernel "
        "window, GEMM/conv/attention and other math kernels are {1:.0f}% of GPU kernel time, and that "
        "window covers {2:.0f}% of the profiled host time.",
        ("Make the model cheaper: quantization (INT8/FP8), distillation, pruning",
         "Then the engine: tensor-core dtypes (bf16/fp16), fused attention, torch.compile / TensorRT"),
        training_suggestions=TRAINING_COMPUTE_ACTIONS,
    ),
    Rule(
        "bandwidth.memory_kernels", "Memory-bound kernels dominate the GPU", Q.BANDWIDTH, L.MODEL, S.WARNING,
        (Condition("kernels.group_share_pct[memory]", ">=", 60.0, 35.0), Condition("gpu.idle_pct", "<=", 30.0, 30.0),
         KERNEL_WINDOW_COVERS),
        "Elementwise/reduction/norm/copy kernels are {0:.0f}% of GPU kernel time on a GPU idle only "
        "{1:.0f}% of the kernel window, which covers {2:.0f}% of the profiled host time: the kernels "
        "wait on memory bandwidth.",
        ("Fuse elementwise chains (torch.compile, fused norms/optimizers)",
         "Lower precision weights/activations (bf16, FP8, INT8/INT4 weight-only) to move fewer bytes"),
        training_suggestions=TRAINING_BANDWIDTH_ACTIONS,
    ),
    Rule(
        "bandwidth.below_ridge", "Op arithmetic intensity is below the GPU's roofline ridge", Q.BANDWIDTH,
        L.MODEL, S.INFO,
        (Condition("kernels.intensity_to_ridge_ratio", "<=", 0.5, 0.5),),
        "The profiled matmul/conv/attention/elementwise ops do {0:.2f}x the ridge point's FLOPs per byte: "
        "too little reuse per byte to reach the tensor-core peak.",
        ("If the ops run in fp32, autocast to bf16/fp16 first: the ridge used is the BF16 tensor-core one",
         "Increase batch size / sequence packing so each weight byte serves more tokens",
         "Weight-only quantization moves fewer bytes per FLOP"),
        training_suggestions=(
            "If the ops run in fp32, autocast to bf16 first: the ridge used is the BF16 tensor-core one",
            "Raise the micro-batch or pack sequences so each weight byte serves more samples",
            "Fuse the low-intensity elementwise ops around the matmuls (torch.compile)"),
        unless=((MOSTLY_FP32, KERNEL_WINDOW_COVERS),),
        unless_reason="the ops run in FP32, whose ridge lies far below the BF16 one used here (see the FP32 finding)",
    ),
    Rule(
        "secondary.fp32_math_trace", "Matmul/conv/attention math runs in FP32", None, L.ENGINE, S.WARNING,
        (MOSTLY_FP32, KERNEL_WINDOW_COVERS),
        "{0:.0f}% of the profiled FLOPs are in ops with float32 inputs (kernels span {1:.0f}% of the "
        "profiled host time): FP32 math runs at a fraction of the GPU's BF16 tensor/matrix-core peak "
        "(H100/H200: 67 vs 989 TFLOP/s; on NVIDIA, TF32 narrows the gap for matmuls and convolutions).",
        ("Run the model in bf16: model.to(torch.bfloat16), or torch.autocast('cuda', dtype=torch.bfloat16)",
         "Or allow TF32 for float32 matmuls and convolutions: torch.set_float32_matmul_precision('high')"),
        training_suggestions=(
            "Autocast to bf16: torch.autocast('cuda', dtype=torch.bfloat16), keeping fp32 master weights",
            "Or allow TF32 for float32 matmuls and convolutions: torch.set_float32_matmul_precision('high')"),
    ),
    Rule(
        "secondary.launch_bound", "Many tiny kernels: launch overhead", Q.SERVICE, L.ENGINE, S.INFO,
        (Condition("kernels.short_kernel_pct", ">=", 50.0, 40.0),
         Condition("gpu.short_gap_idle_pct", ">=", 20.0, 40.0)),
        "{0:.0f}% of kernels are short (under the short-kernel maximum, 10 us by default) and the GPU "
        "idles {1:.0f}% of the window in gaps shorter than the idle-gap minimum: per-kernel launch "
        "cost, not GPU work, sets the pace.",
        ("Capture the step in a CUDA graph or compile it (torch.compile mode='reduce-overhead')",
         "Fuse small ops; batch more items per call"),
    ),
    Rule(
        "secondary.comm_exposed", "Collectives run exposed, not overlapped with compute", None, L.ENGINE,
        S.WARNING,
        (Condition("gpu.comm_exposed_pct", ">=", 15.0, 35.0), Condition("gpu.comm_exposed_ms", ">=", 1.0, 0.0),
         KERNEL_WINDOW_COVERS),
        "For {0:.0f}% of the kernel window ({1:.1f} ms) NCCL/RCCL collectives ran with no compute kernel "
        "beside them: communication sits on the critical path.",
        ("Overlap collectives with compute (async collectives on a side stream); for tensor parallelism, "
         "fewer ranks per replica or a faster interconnect",
         "Then the system: check the transport NCCL picked (NCCL_DEBUG=INFO: NVLink/InfiniBand, not "
         "sockets) and whether ranks wait on a straggler"),
        training_suggestions=(
            "Overlap gradient collectives with backward: DDP bucket_cap_mb and gradient_as_bucket_view=True; "
            "FSDP backward_prefetch/forward_prefetch; gradient accumulation with no_sync() between steps",
            "Then the system: check the transport NCCL picked (NCCL_DEBUG=INFO: NVLink/InfiniBand, not "
            "sockets) and whether ranks wait on a straggler"),
    ),
    Rule(
        "secondary.straggler_rank", "A straggler rank holds the job back", None, L.SYSTEM, S.WARNING,
        (Condition("gpu.straggler_lag_ms", ">=", 0.5, 10.0), Condition("gpu.sync_skew_pct", ">=", 20.0, 40.0)),
        "The latest rank starts its collectives or steps {0:.1f} ms after the median rank, and "
        "{1:.0f}% of the matched collectives' time is the other ranks waiting for it (synchronisation "
        "skew, not data moving): the Ranks table names the rank.",
        ("Look at the late rank's own verdict first (its row in the Ranks table; `diagnose attach` on its "
         "pod): input loading, host CPU contention, a throttled or degraded GPU, a slower NIC",
         "Balance the work across ranks (uneven shards or sequence lengths make one rank late every step)",
         "Then the system: clock sync between hosts (NTP/PTP) if the lag is under a millisecond"),
    ),
    Rule(
        "secondary.host_syncs", "The host blocks on GPU synchronisation", None, L.ENGINE, S.INFO,
        (Condition("torch.sync_blocked_pct", ">=", 10.0, 30.0),),
        "The host spent {0:.0f}% of the trace blocked in cuda*/hip*Synchronize or blocking copies.",
        ("Remove .item()/.cpu()/print of GPU tensors from the loop; use non_blocking copies and events",),
        unless=GPU_BUSY, unless_reason="the GPU was busy, so the host waiting for it is expected",
    ),
    Rule(
        "secondary.d2h_pageable", "Device-to-host copies into pageable memory", None, L.SYSTEM, S.INFO,
        (Condition("torch.d2h_pageable_copies", ">=", 1.0, 100.0),),
        "{0:.0f} device-to-host copies went to pageable memory: each one synchronises the stream.",
        ("Copy into pinned buffers (tensor.pin_memory(), non_blocking=True)",),
    ),
    Rule(
        "secondary.h2d_pageable", "Host-to-device copies from pageable memory", None, L.SERVICE, S.INFO,
        (Condition("torch.h2d_pageable_pct", ">=", 10.0, 40.0),),
        "Copies from pageable host memory to the GPU take {0:.0f}% of the kernel window: each is staged "
        "through a driver buffer and cannot overlap with compute.",
        ("Allocate input batches in pinned memory (DataLoader(pin_memory=True), tensor.pin_memory())",
         "Then copy with non_blocking=True on a side stream, one batch ahead of the model"),
    ),
    Rule(
        "service.input_pipeline", "The input pipeline takes a large share of each step", Q.SERVICE, L.SERVICE,
        S.WARNING,
        (Condition("torch.dataloader_share_pct", ">=", 30.0, 40.0),),
        "DataLoader work is {0:.0f}% of step time.",
        ("More DataLoader workers, persistent_workers=True, pin_memory=True, prefetch_factor",
         "Move decoding/augmentation to the GPU (DALI, torchvision v2 on device)"),
    ),
    Rule(
        "service.queueing", "Requests spend their time queued", Q.SERVICE, L.SERVICE, S.CRITICAL,
        (Condition("spans.stage_share_pct[queue]", ">=", 30.0, 40.0),),
        "Requests spend {0:.0f}% of their time in queue spans: arrivals exceed the service rate.",
        ("Dynamic/continuous batching to raise the service rate",
         "Per-model queues with admission control; then add replicas (capacity)"),
    ),
    Rule(
        "service.preprocess_stage", "Pre-processing dominates request time", Q.SERVICE, L.SERVICE, S.WARNING,
        (Condition("spans.stage_share_pct[preprocess]", ">=", 30.0, 40.0),),
        "Pre-processing/tokenization spans hold {0:.0f}% of request time.",
        ("Fast (Rust) tokenizers with batch encoding; parallel/pipelined preprocessing",),
    ),
    Rule(
        "io.network_stage", "Requests wait on the network", Q.IO, L.SYSTEM, S.WARNING,
        (Condition("spans.stage_share_pct[network]", ">=", 30.0, 40.0),),
        "Outgoing network calls hold {0:.0f}% of request time.",
        ("Connection pools / keep-alive, timeouts, caching of remote results, async IO",),
    ),
    Rule(
        "io.db_stage", "Requests wait on a database", Q.IO, L.SYSTEM, S.WARNING,
        (Condition("spans.stage_share_pct[db]", ">=", 30.0, 40.0),),
        "Database spans hold {0:.0f}% of request time.",
        ("Index or cache the queries; pool connections; batch lookups",),
    ),
    Rule(
        "secondary.gc_in_tail", "GC pauses overlap the slowest requests", None, L.SERVICE, S.INFO,
        # against every request: when pauses are so frequent that any request overlaps one, they do not
        # explain the tail (seen: "100% overlap a GC pause (all: 100%)")
        (Condition("spans.tail_gc_overlap_pct", ">=", 30.0, 50.0),
         Condition("spans.tail_gc_overlap_excess_pct", ">=", 20.0, 40.0)),
        "{0:.0f}% of the slowest 1% of requests overlap a garbage-collection pause, {1:.0f} points more than "
        "requests overall.",
        ("gc.freeze() after start-up, raise gc thresholds, avoid creating cyclic garbage per request",),
    ),
)

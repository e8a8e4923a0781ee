"""Kernel catalog: which GPU kernel / runtime-call names mean which kind of work. Data, not code.

Names are matched with ``re.search`` in order; the first pattern that matches decides. Patterns
cover CUDA (cuBLAS/cuDNN/CUTLASS/ATen/Triton) and ROCm (rocBLAS/Tensile ``Cijk_``, MIOpen, hip*
runtime calls) spellings; ``nvjet_sm90_*`` are cuBLAS's JIT GEMM kernels on Hopper (seen on an H200
for every bf16 torch.matmul). Groups: ``compute`` (GEMM, convolution, attention, other math),
``memory`` (elementwise, reduction, normalisation, copy, memcpy/memset), ``communication``
(NCCL/RCCL collectives) and ``sync``.

``TEMPORAL_NON_COMPUTE`` is Holistic Trace Analysis' own definition of a non-compute GPU event
(``hta/utils/utils.py``: NCCL kernels, anything named Memcpy/Memset, and sync events); the
temporal breakdown uses it so that its figures can be compared with HTA's.
"""
from __future__ import annotations

from dataclasses import dataclass


class KernelGroup:
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    SYNC = "sync"


@dataclass(frozen=True)
class KernelPattern:
    category: str
    group: str
    pattern: str


G = KernelGroup
KERNEL_CATALOG: tuple[KernelPattern, ...] = (
    KernelPattern("memcpy", G.MEMORY, r"^(Memcpy|dma|hipMemcpy)|\bMemcpy\b"),
    KernelPattern("memset", G.MEMORY, r"^(Memset|hipMemset)|\bMemset\b"),
    KernelPattern("sync", G.SYNC, r"^(Stream Sync|Event Sync|Context Sync|Stream Wait Event|Device Sync|event_wait$|event_record$)"),
    KernelPattern("collective", G.COMMUNICATION, r"(?i)^(void )?(nccl|rccl)|ncclDevKernel|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|c10d"),
    KernelPattern("attention", G.COMPUTE, r"(?i)flash|fmha|attention|attn|sdpa|mha_|paged_attention|xformers"),
    KernelPattern("norm", G.MEMORY, r"(?i)layer_?norm|batch_?norm|rms_?norm|group_?norm|bn_fw|bn_bw|cudnn::bn_|instance_?norm|MIOpenBatchNorm"),
    KernelPattern("conv", G.COMPUTE, r"(?i)conv|implicit_?gemm|fprop|dgrad|wgrad|winograd|scudnn|fft2d|MIOpen.*(Conv|Winograd)|igemm"),
    KernelPattern("gemm", G.COMPUTE, r"(?i)gemm|gemv|cutlass|cublas|matmul|nvjet|xmma|sm\d+_xmma|^Cijk_|rocblas|hipblaslt|wgmma|s16816|s1688|h884|dot_kernel|splitKreduce"),
    KernelPattern("reduction", G.MEMORY, r"(?i)reduce_kernel|reduction|softmax|triton_(red|per)_|cub::|argmax|topk|sort|scan_kernel|cumsum"),
    KernelPattern("copy", G.MEMORY, r"(?i)copy|CatArrayBatched|cat_|index|gather|scatter|embedding|transpose|permute|nchwToNhwc|nhwcToNchw|pad|roll|flip|repeat|fill"),
    KernelPattern("elementwise", G.MEMORY, r"(?i)elementwise|triton_poi_|vectorized|unrolled|pointwise|multi_tensor_apply|foreach|activation|relu|gelu|silu|dropout|clamp|add_|mul_|max_pool|avg_pool|adaptive_average_pool"),
)
DEFAULT_CATEGORY = KernelPattern("other_compute", G.COMPUTE, r"")

# Holistic Trace Analysis' non-compute test (is_compute_kernel), plus RCCL spellings, MTIA's DMA (as HTA's
# compute pattern leaves it out) and MTIA's device-side event waits (its "Stream Wait Event").
TEMPORAL_NON_COMPUTE = r"^nccl.*Kernel|^rccl|Memcpy|^Memset|Sync|^dma|^event_(wait|record)$"

# Host-side calls that block the CPU thread until the GPU catches up (CUDA and HIP; MTIA's runtime
# writes "synchronizeStream" and "synchronize").
SYNC_CALLS = r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|StreamWaitEvent|Memcpy(?!Async)|MemcpyWithStream|MemcpyDtoH(?!Async))|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize)|^synchronize(Stream|Device|Event)?$"
# Host-side calls that enqueue work (their start is when the host asked for the kernel); MTIA's
# launch is "runFunction - job_prep_and_submit_for_execution" (as Holistic Trace Analysis reads it).
LAUNCH_CALLS = r"^(cuda|hip|cu)(Launch|ExtModuleLaunch|ModuleLaunch|GraphLaunch|Memcpy|Memset|LaunchKernel)|^hipExtLaunch|^cuLaunchKernel|^runFunction\b"
# Memcpy direction and host memory kind, from Kineto's memcpy names, e.g.
# "Memcpy DtoH (Device -> Pageable)"; ROCm writes "Memcpy HtoD (Host -> Device)".
MEMCPY_DIRECTION = r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)\b"
MEMCPY_PAGEABLE = r"Pageable"
MEMCPY_PINNED = r"Pinned"

# CPU-side annotations of the input pipeline (torch DataLoader iterator, record_function labels).
DATALOADER = r"(?i)enumerate\(DataLoader\)|DataLoader|_next_data|dataloader|data_?load|fetch_batch"
PROFILER_STEP = r"^ProfilerStep\s*#\s*(\d+)"
# Host ops only a training step runs: autograd's backward nodes and the optimizer's step/zero_grad
# (torch.optim wraps them in record_function("Optimizer.step#AdamW.step")).
TRAINING_OPS = r"^autograd::engine::evaluate_function: |^Optimizer\.(step|zero_grad)#"
# A data-parallel step's gradient all-reduce (the process group's record_function), counted as training
# work only inside ProfilerStep#N steps: tensor-parallel serving all-reduces too, but rarely under a
# profiler schedule's steps. A trace of one rank of a DDP job may hold no autograd ops at all.
GRADIENT_SYNC = r"^(gloo|nccl):all_reduce$|^c10d::allreduce_"
# Host-side collectives (the process group's record_function labels). On a CPU-only trace (gloo, MPI)
# their time on the host is the communication itself, not Python between ops.
HOST_COLLECTIVES = r"^(gloo|nccl|mpi|ucc):[a-z_]+$|^c10d::[a-z_]+_$|^record_param_comms$"

__all__ = ["DATALOADER", "DEFAULT_CATEGORY", "GRADIENT_SYNC", "HOST_COLLECTIVES", "KERNEL_CATALOG", "KernelGroup", "KernelPattern",
           "LAUNCH_CALLS", "MEMCPY_DIRECTION", "MEMCPY_PAGEABLE", "MEMCPY_PINNED", "PROFILER_STEP",
           "SYNC_CALLS", "TEMPORAL_NON_COMPUTE", "TRAINING_OPS"]

"""Term kinds of the time account: what each part of the time means. Data, not code.

Each kind names a quadrant (None: no load), the layer to act on and the rule whose finding and
remedies explain it (rules/). The account sources (threads.py, gpu.py, requests.py) only say how
much time each kind holds.
"""
from __future__ import annotations

from dataclasses import dataclass

from diagnose.catalogs.frames import Category
from diagnose.model import STOPPED, Layer, Quadrant

Q, L = Quadrant, Layer


@dataclass(frozen=True)
class TermKind:
    kind: str
    label: str
    quadrant: Quadrant | None
    layer: Layer | None
    rule_id: str | None


def _k(*a: object) -> TermKind:
    return TermKind(*a)  # type: ignore[arg-type]


KINDS: dict[str, TermKind] = {k.kind: k for k in (
    # Thread-time (py-spy x /proc): on a CPU, or waiting on something the thread itself called.
    _k("cpu.compute", "model work on the CPU (torch/numpy native code)", Q.COMPUTE, L.MODEL, "compute.cpu_framework"),
    # The same model work, when the profiled torch ops stream memory (CPU-only trace, arithmetic
    # intensity below CPU_MEMORY_BOUND_FLOP_PER_BYTE): the kind the thread account uses for it instead.
    _k("cpu.memory", "model work on the CPU streaming memory (torch ops of low arithmetic intensity)", Q.BANDWIDTH,
       L.MODEL, None),
    # Threads py-spy never saw (no Python frames): their CPU time from /proc, e.g. a BLAS or OpenMP pool
    # that runs the model's math beside the Python thread that called it.
    _k("cpu.native", "native threads without Python frames (BLAS/OpenMP/intra-op pools)", Q.COMPUTE, L.MODEL,
       "compute.cpu_native_threads"),
    _k("cpu.serialization", "serialization (json/pickle/protobuf)", Q.SERVICE, L.SERVICE, "service.serialization"),
    _k("cpu.tokenization", "tokenization", Q.SERVICE, L.SERVICE, "service.tokenization"),
    _k("cpu.python", "interpreted Python code", Q.SERVICE, L.SERVICE, "service.python_overhead"),
    _k("cpu.preprocess", "pre-processing inputs on the CPU (image/audio decode, resize, transforms)", Q.SERVICE,
       L.SERVICE, "service.preprocessing"),
    # A training loop's input pipeline: the DataLoader's fetch on the loop's own thread, or the loop
    # waiting for its workers; either way the model waits for data (service layer: the code around it).
    _k("cpu.input", "the input pipeline on the training loop's thread (DataLoader fetch: decode, augment, collate)",
       Q.SERVICE, L.SERVICE, "service.input_pipeline"),
    _k("wait.input", "the training loop waiting for its DataLoader workers' next batch", Q.SERVICE, L.SERVICE,
       "service.input_pipeline"),
    # A synchronous call inside a coroutine: its wait (on a peer, a sleep, a lock) holds the whole loop, so
    # the fix is in the service (an async client, run_in_executor), not in the peer.
    _k("wait.loop_blocked", "the event loop blocked in a synchronous call inside a coroutine (every request "
       "on it waits)", Q.SERVICE, L.SERVICE, "service.loop_blocked"),
    _k("cpu.gc", "garbage collection", Q.SERVICE, L.SERVICE, "secondary.gc_in_tail"),
    _k("io.copy", "copying data through sockets or files (kernel CPU)", Q.IO, L.SYSTEM, "io.data_movement"),
    _k("io.wait", "waiting on sockets, files or pipes", Q.IO, L.SYSTEM, "io.blocked_in_stacks"),
    _k("gpu.wait", "waiting for the GPU (synchronisation, .item(), .cpu())", Q.COMPUTE, L.ENGINE,
       "secondary.host_syncs"),
    _k("wait.gil", "waiting for the GIL (runnable Python threads share one interpreter)", Q.SERVICE, L.SERVICE,
       "service.gil_bound"),
    # No quadrant of the target's: its host held it back (the verdict names a starved host instead).
    _k("wait.core", "waiting for a CPU core (the host's CPUs are busy)", None, L.SYSTEM, "secondary.cpu_starved"),
    _k("wait.lock", "waiting on a lock whose holder the samples do not show", Q.SERVICE, L.SERVICE,
       "secondary.lock_contention"),
    _k("idle.work", "waiting for work", None, None, "secondary.idle_target"),
    # No quadrant: the thread was stopped (SIGSTOP, a debugger): its stack is frozen, not work.
    _k(STOPPED, "stopped (SIGSTOP, a debugger or a suspended job): frozen stacks, not work", None, L.SYSTEM,
       "secondary.target_stopped"),
    # GPU time (kernel timeline): busy by kernel group, idle by cause.
    _k("gpu.compute", "GPU busy in compute kernels (GEMM/conv/attention and other math)", Q.COMPUTE, L.MODEL,
       "compute.gpu_compute_kernels"),
    _k("gpu.memory", "GPU busy in memory-bound kernels (elementwise/reduction/copy)", Q.BANDWIDTH, L.MODEL,
       "bandwidth.memory_kernels"),
    _k("gpu.comm_exposed", "GPU in exposed communication (collectives with no compute beside them)", Q.IO,
       L.ENGINE, "secondary.comm_exposed"),
    _k("gpu.idle_host", "GPU idle: the host did not launch the next kernel in time", Q.SERVICE, L.SERVICE,
       "service.gpu_starved_by_host"),
    _k("gpu.idle_input", "GPU idle while the host waits on reads (input pipeline)", Q.IO, L.SYSTEM,
       "io.gpu_gaps_host_in_io"),
    _k("gpu.idle_sync", "GPU idle while the host blocks in synchronisations or blocking copies", Q.SERVICE,
       L.ENGINE, "secondary.host_syncs"),
    _k("gpu.idle_launch", "GPU idle in kernel-to-kernel gaps (launch overhead)", Q.SERVICE, L.ENGINE,
       "secondary.launch_bound"),
    _k("gpu.idle_outside", "GPU idle outside the kernel window (no work was launched)", Q.SERVICE, L.SERVICE,
       "service.gpu_starved_by_host"),
    _k("gpu.idle_other", "GPU idle, waiting on other streams or events", None, None, None),
    # CPU-only torch traces: the host's torch-op timeline.
    _k("torch.ops", "torch ops running (framework compute)", Q.COMPUTE, L.MODEL, "compute.cpu_framework"),
    _k("torch.comm", "the host in collectives with no torch op running (gloo/MPI all-reduce on the CPU)", Q.IO,
       L.ENGINE, "secondary.comm_exposed"),
    _k("torch.between_ops", "no torch op running: Python or the input pipeline between model calls",
       Q.SERVICE, L.SERVICE, "service.torch_starved_on_cpu"),
    # Request time (stage spans).
    _k("stage.queue", "requests queued", Q.SERVICE, L.SERVICE, "service.queueing"),
    _k("stage.preprocess", "pre-processing / tokenization stage", Q.SERVICE, L.SERVICE, "service.preprocess_stage"),
    _k("stage.model", "model stage", Q.COMPUTE, L.MODEL, None),
    _k("stage.postprocess", "post-processing / serialization stage", Q.SERVICE, L.SERVICE, None),
    _k("stage.network", "outgoing network calls", Q.IO, L.SYSTEM, "io.network_stage"),
    _k("stage.db", "database calls", Q.IO, L.SYSTEM, "io.db_stage"),
    # Request time inside a serving engine (its own /metrics histograms or duration counters).
    _k("engine.queue", "waiting in the engine's queue", Q.SERVICE, L.SERVICE, "service.engine_queueing"),
    _k("engine.prefill", "prefill (prompt processing, first token)", Q.COMPUTE, L.MODEL, None),
    _k("engine.decode", "decode (output tokens after the first)", Q.COMPUTE, L.MODEL, None),
    _k("engine.inference", "inference in the engine (prefill and decode)", Q.COMPUTE, L.MODEL, None),
    _k("engine.scheduler_wait", "GPU idle in the engine, waiting for its CPU scheduler (SGLang overlap wait)",
       Q.SERVICE, L.ENGINE, "service.engine_scheduler_gaps"),
    _k("engine.compute_infer", "model execution (Triton compute_infer)", Q.COMPUTE, L.MODEL, None),
    _k("engine.tensor_io", "input/output tensor handling (Triton compute_input + compute_output)", Q.SERVICE,
       L.ENGINE, None),
)}

# Frame category of an on-CPU or self-caused wait -> thread term kind.
CATEGORY_KIND: dict[str, str] = {
    Category.FRAMEWORK_COMPUTE: "cpu.compute", Category.SERIALIZATION: "cpu.serialization",
    Category.TOKENIZATION: "cpu.tokenization", Category.PYTHON: "cpu.python", Category.GC: "cpu.gc",
    Category.IO_CPU: "io.copy", Category.IO_WAIT: "io.wait", Category.IO_MAYBE: "io.wait",
    Category.CUDA_SYNC: "gpu.wait", Category.PREPROCESS: "cpu.preprocess", Category.INPUT_PIPELINE: "cpu.input",
    Category.INPUT_WAIT: "wait.input", Category.LOOP_BLOCKED: "wait.loop_blocked",
}
# Kinds a thread holds while running (part of it may be spent runnable, waiting for a core).
ON_CPU = frozenset({"cpu.compute", "cpu.native", "cpu.memory", "cpu.serialization", "cpu.tokenization", "cpu.python",
                    "cpu.gc", "io.copy", "cpu.preprocess", "cpu.input"})
# Work of a Python thread that, found asleep in a futex, may wait for the GIL: Python code, or a
# native call (numpy/torch) that released the GIL and waits to take it back.
GIL_WAITERS = frozenset({"cpu.serialization", "cpu.tokenization", "cpu.python", "cpu.gc", "cpu.compute",
                         "cpu.preprocess", "cpu.input"})
# Work that holds the GIL while it runs (native framework compute releases it).
GIL_HOLDING = frozenset({"cpu.serialization", "cpu.tokenization", "cpu.python", "cpu.gc"})

# A request waiting on a model worker that runs unbatched is service queueing (batching fixes it).
UNBATCHED = TermKind("wait.unbatched", "queued in front of an unbatched model worker", Q.SERVICE, L.SERVICE,
                     "service.unbatched")

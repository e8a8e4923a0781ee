"""First rules: CPU-side verdicts from py-spy stacks and process/thread metrics.

Thresholds follow common practice: one thread >= 85% of a core while the process stays near one
core is the signature of a GIL-bound server; >= 30% of active thread-time in one software
category makes it the first thing to fix.
"""
from dataclasses import replace

from diagnose.model import Layer, Quadrant, Severity
from diagnose.rules.base import Condition, Rule
from diagnose.rules.gpu import GPU_BUSY, GPU_BUSY_REASON

Q, L, S = Quadrant, Layer, Severity

_CPU_RULES: tuple[Rule, ...] = (
    Rule(
        "service.serialization", "Serialization dominates the CPU", Q.SERVICE, L.SERVICE, S.CRITICAL,
        (Condition("cpu.category_share_pct[serialization]", ">=", 30.0, 50.0),),
        "{0:.0f}% of active Python thread-time is in serialization (json/pickle/protobuf).",
        ("Replace json with orjson/msgspec, or send protobuf/binary tensors instead of JSON lists",
         "Serialize once: cache encoded responses, avoid dumps/loads round trips",
         "Move serialization off the request thread (process pool) or compress less"),
    ),
    Rule(
        "service.gil_bound", "Python threads saturate one core (GIL-bound)", Q.SERVICE, L.SERVICE, S.CRITICAL,
        (Condition("cpu.python_busy_pct", ">=", 80.0, 15.0),
         Condition("cpu.process_util_pct", "<=", 135.0, 35.0)),
        "A Python thread was running or waiting to run in {0:.0f}% of readings while the process "
        "used {1:.0f}% of a core: Python work is serialized on one core (the GIL).",
        ("Run several worker processes (gunicorn/uvicorn workers, torch multiprocessing)",
         "Batch requests so the per-request Python overhead is paid once per batch",
         "Move CPU-heavy Python (pre/post-processing) to vectorized or native code"),
    ),
    Rule(
        "service.tokenization", "Tokenization dominates the CPU", Q.SERVICE, L.SERVICE, S.WARNING,
        (Condition("cpu.category_share_pct[tokenization]", ">=", 25.0, 40.0),),
        "{0:.0f}% of active Python thread-time is in tokenization.",
        ("Use a fast (Rust) tokenizer with batch encoding",
         "Tokenize in parallel worker processes, pipelined with the model"),
    ),
    Rule(
        "service.input_pipeline", "The training loop waits for its input pipeline", Q.SERVICE, L.SERVICE,
        S.CRITICAL,
        (Condition("cpu.input_pipeline_share_pct", ">=", 25.0, 50.0),),
        "{0:.0f}% of active thread-time is the input pipeline: the DataLoader's fetch (decode, augmentation, "
        "collate) on the training loop's thread, or the loop waiting for its workers' next batch; the model "
        "waits for data meanwhile.",
        ("Load in parallel: DataLoader(num_workers=N) with N up to the free cores, persistent_workers=True and "
         "prefetch_factor=2-4, so the next batches are ready while the step runs",
         "Move decoding and augmentation off the loop: decode once and cache, or augment batched tensors on "
         "the GPU (torchvision.transforms.v2, DALI)",
         "pin_memory=True with non_blocking=True copies, so the host-to-device copy overlaps the step"),
    ),
    Rule(
        "service.loop_blocked", "A blocking call holds the event loop", Q.SERVICE, L.SERVICE, S.CRITICAL,
        (Condition("cpu.category_share_pct[loop_blocked]", ">=", 20.0, 50.0),),
        "{0:.0f}% of active thread-time the event loop sat in a synchronous call inside a coroutine (a blocking "
        "socket or HTTP call, time.sleep, a lock), not in its selector: every request on the loop waited for it.",
        ("Make the call asynchronous: an async client (aiohttp, httpx.AsyncClient, asyncpg) or asyncio.sleep",
         "Or hand it off: await loop.run_in_executor(None, call) / asyncio.to_thread(call) for blocking code "
         "that has no async version",
         "Then measure the peer: with the loop free, its latency is what requests wait for"),
    ),
    Rule(
        "service.preprocessing", "Request pre-processing dominates the CPU", Q.SERVICE, L.SERVICE, S.WARNING,
        (Condition("cpu.category_share_pct[preprocess]", ">=", 30.0, 50.0),),
        "{0:.0f}% of active thread-time decodes or transforms inputs (Pillow, OpenCV, torchvision "
        "transforms) before the model.",
        ("Pre-process in a process pool or a separate stage pipelined with the model, not on the request thread",
         "Decode less: at the target size (Pillow draft(), turbojpeg scaling), or take the model-ready size "
         "from the client",
         "Batch the transforms on tensors (on the GPU where the model runs)"),
    ),
    Rule(
        "service.python_overhead", "Interpreted Python code dominates", Q.SERVICE, L.SERVICE, S.WARNING,
        (Condition("cpu.category_share_pct[python]", ">=", 60.0, 30.0),
         Condition("cpu.max_thread_demand_pct", ">=", 70.0, 25.0)),
        "{0:.0f}% of active thread-time is plain Python with a thread demanding {1:.0f}% of a core.",
        ("Profile the top Python functions below and vectorize or cache them",
         "Batch work to amortize per-item Python overhead"),
    ),
    Rule(
        "io.data_movement", "Moving data through sockets or files costs CPU", Q.IO, L.SYSTEM, S.WARNING,
        (Condition("cpu.category_share_pct[io_cpu]", ">=", 25.0, 40.0),),
        "{0:.0f}% of active thread-time is inside socket/file calls while running in the kernel "
        "(copying data, nobody is waited on): the volume of data moved is the cost.",
        ("Move less: drop fields the client does not use, send binary tensors instead of JSON lists",
         "Read inputs once (cache decoded data in memory) and in large blocks, or memory-map them",
         "Compress only if the network, not the CPU, is the limit"),
    ),
    Rule(
        "io.blocked_in_stacks", "Threads wait on sockets or files", Q.IO, L.SYSTEM, S.CRITICAL,
        (Condition("cpu.category_share_pct[io_wait]", ">=", 40.0, 40.0),
         Condition("cpu.python_busy_pct", "<=", 60.0, 40.0)),
        "{0:.0f}% of active Python thread-time is blocked in socket/file reads or writes; a Python "
        "thread was running in only {1:.0f}% of readings.",
        ("Find the slow peer: add timeouts and measure its latency",
         "Use connection pools / keep-alive, async IO, or prefetch and cache inputs",
         "Overlap IO with compute (background readers, pinned-memory prefetch)"),
    ),
    Rule(
        "io.blocked_in_kernel", "Threads sleep in kernel IO waits", Q.IO, L.SYSTEM, S.WARNING,
        (Condition("threads.blocked_io_share_pct", ">=", 40.0, 40.0),
         Condition("cpu.python_busy_pct", "<=", 60.0, 40.0)),
        "{0:.0f}% of thread readings of work in progress sat in a kernel IO wait channel "
        "(socket/pipe/disk); a Python thread was running in only {1:.0f}% of readings.",
        ("Check the network/disk peer the threads wait on (wchan in the thread table)",
         "Use async IO or more concurrent connections"),
    ),
    Rule(
        "io.host_iowait", "The host spends time in iowait", Q.IO, L.SYSTEM, S.WARNING,
        (Condition("sys.iowait_pct", ">=", 20.0, 30.0),),
        "The host CPUs were {0:.0f}% in iowait during the capture.",
        ("Move data to faster storage or page cache; prefetch inputs",),
    ),
    Rule(
        "compute.cpu_framework", "Native framework compute saturates the CPU", Q.COMPUTE, L.MODEL, S.CRITICAL,
        (Condition("cpu.category_share_pct[framework_compute]", ">=", 40.0, 50.0),
         Condition("cpu.process_demand_pct", ">=", 80.0, 80.0)),
        "{0:.0f}% of active Python thread-time is inside framework compute (torch/numpy), with the "
        "process demanding {1:.0f}% of a core.",
        ("Make the model cheaper: INT8 dynamic quantization, distillation or a smaller model",
         "Then the engine: torch.compile / ONNX Runtime / OpenVINO with oneDNN, tuned intra-op threads",
         "Then capacity: more cores or a GPU for this model size"),
    ),
    Rule(
        "compute.cpu_native_threads", "Native worker threads burn most of the CPU", Q.COMPUTE, L.MODEL, S.WARNING,
        (Condition("cpu.native_thread_cpu_share_pct", ">=", 30.0, 40.0),
         Condition("cpu.process_demand_pct", ">=", 120.0, 80.0)),
        "{0:.0f}% of the process CPU is spent in threads with no Python frames (BLAS/OpenMP "
        "workers), the process demanding {1:.0f}% of a core.",
        ("Quantize or shrink the model; check intra-op thread count vs physical cores",),
    ),
    Rule(
        "secondary.host_cpu_saturated", "The host's CPUs are saturated", None, L.SYSTEM, S.WARNING,
        (Condition("sys.cpu_util_pct", ">=", 90.0, 10.0),),
        "All host CPUs together were {0:.0f}% busy: the target competes with other processes "
        "for cores, so its own numbers understate its demand.",
        ("Check what else runs on the host (load generators, sidecars, data loaders)",
         "Pin the service to dedicated cores or give it a larger CPU quota"),
    ),
    Rule(
        "secondary.cpu_starved", "The target waits for a free core", None, L.SYSTEM, S.WARNING,
        (Condition("cpu.runqueue_wait_pct", ">=", 20.0, 30.0),),
        "{0:.0f}% of the target's CPU demand was spent runnable but waiting for a core (schedstat "
        "run-queue time): other processes or a CPU quota hold it back.",
        ("Give the service dedicated cores or a larger CPU quota before tuning its code",),
    ),
    Rule(
        "secondary.idle_target", "The target was idle", None, L.SERVICE, S.INFO,
        (Condition("cpu.idle_share_pct", ">=", 95.0, 5.0),
         Condition("cpu.process_demand_pct", "<=", 10.0, 10.0)),
        "{0:.0f}% of sampled thread-time was waiting for work and the process demanded {1:.1f}% "
        "of a core: there was no load to diagnose.",
        ("Capture again while the service is under representative load",),
    ),
    Rule(
        "secondary.target_stopped", "The target was stopped", None, L.SYSTEM, S.CRITICAL,
        (Condition("threads.stopped_share_pct", ">=", 50.0, 50.0),),
        "{0:.0f}% of thread readings found the target stopped (SIGSTOP, a debugger or a "
        "suspended job): its stacks are frozen, not busy.",
        ("Resume it (kill -CONT <pid> or detach the debugger) and capture again",),
        blocks_verdict=True,
    ),
    Rule(
        "secondary.target_exited_early", "The target exited early in the capture", None, L.SYSTEM, S.CRITICAL,
        (Condition("capture.target_alive_s", "<=", 2.0, 2.0),),
        "The target exited {0:.1f} s into the capture: too little of it ran under observation to judge, and "
        "what was sampled includes its exit (its exit hooks, threads waiting to be joined).",
        ("Capture again while it runs, for longer (`diagnose run --capture S -- CMD` for a short job)",),
        blocks_verdict=True,
    ),
    Rule(
        "secondary.lock_contention", "Threads contend on locks", None, L.SERVICE, S.INFO,
        (Condition("cpu.category_share_pct[lock_wait]", ">=", 20.0, 40.0),),
        "{0:.0f}% of active Python thread-time waits on a lock.",
        ("If the lock guards a connection or client (a pool of one), raise the pool size or make the call "
         "outside the lock",
         "Shorten critical sections; use per-worker queues instead of a shared lock"),
    ),
)

# A CPU verdict needs the GPU (where one is measured) not to be the busy side.
_GATED: tuple[Rule, ...] = tuple(replace(r, unless=GPU_BUSY, unless_reason=GPU_BUSY_REASON) if r.quadrant else r
                                 for r in _CPU_RULES)
# A target that waits for a core longer than it runs (wait/(run+wait) >= 55%: 1.25x, the account's
# starved-host ratio) is held back by its host: one busy interpreter there is not "GIL-bound".
STARVED = Condition("cpu.runqueue_wait_pct", ">=", 55.0, 0.0)
CPU_RULES: tuple[Rule, ...] = tuple(
    replace(r, unless=r.unless + (STARVED,), unless_reasons=(
        (STARVED.signal, "the target waits for a core longer than it runs: its host holds it back, not the GIL"),))
    if r.id == "service.gil_bound" else r for r in _GATED)

"""Frame catalog: which stack frames mean which kind of work. Data, not code.

A sampled stack is classified by walking it from the innermost frame outwards; the first pattern
that matches decides. Patterns with ``leaf_only`` (wait states, and every ``source`` pattern, which
reads the source line of the call the frame is making) only apply to the innermost Python frame:
a thread is blocked where it *is*, not where its callers are. All regexes use ``re.search``.

The same library code means different things by where it is called: Pillow decoding under a
DataLoader's fetch is the input pipeline, in a request handler before the model it is
pre-processing, under the model's forward it is model work. So a stack has a *call path* too:
walking it from the root inwards, the first CALL_PATHS pattern that matches decides
(``diagnose.signals.stacks.categorize``), and CONTEXT_CATEGORY says what each path makes of
the leaf's category.
"""
from __future__ import annotations

from dataclasses import dataclass


class Category:
    SERIALIZATION = "serialization"
    TOKENIZATION = "tokenization"
    IO_WAIT = "io_wait"
    IO_CPU = "io_cpu"  # in socket/file calls but running: the kernel copies data, nobody is waited on
    IO_MAYBE = "io_maybe"  # generic read/write call: resolved by the kernel reading, never reported
    LOCK_WAIT = "lock_wait"
    IDLE = "idle"  # waiting for work: sleeping, accept/select with nothing to do
    HANDOFF = "handoff"  # waiting on another thread: an event, a condition, a queue, a join
    GC = "gc"
    FRAMEWORK_COMPUTE = "framework_compute"
    CUDA_SYNC = "cuda_sync"
    PYTHON = "python"
    PREPROCESS = "preprocess"  # image/audio decode, resize, transforms (Pillow, OpenCV, torchvision transforms)
    INPUT_PIPELINE = "input_pipeline"  # a DataLoader's fetch on the training loop's thread: decode, augment, collate
    INPUT_WAIT = "input_wait"  # the training loop waiting for its DataLoader workers' next batch
    LOOP_BLOCKED = "loop_blocked"  # an event loop's callback blocked in a synchronous wait: the whole loop waits


# Categories where a thread is parked (waiting for work, or on another thread) rather than doing
# or waiting on work itself. The time account (diagnose/account/threads.py) attributes a HANDOFF
# wait to what the other threads do meanwhile; the signals count both as not active.
PARKED = frozenset({Category.IDLE, Category.HANDOFF})
ALL_CATEGORIES = (
    Category.SERIALIZATION, Category.TOKENIZATION, Category.IO_WAIT, Category.IO_CPU, Category.LOCK_WAIT,
    Category.GC, Category.FRAMEWORK_COMPUTE, Category.CUDA_SYNC, Category.PYTHON, Category.PREPROCESS,
    Category.INPUT_PIPELINE, Category.INPUT_WAIT, Category.LOOP_BLOCKED, Category.IDLE, Category.HANDOFF,
)


@dataclass(frozen=True)
class FramePattern:
    category: str
    function: str | None = None
    file: str | None = None
    source: str | None = None
    parent: str | None = None  # regex on the caller's function (only checked at the leaf)
    leaf_only: bool = False


C = Category
FRAME_CATALOG: tuple[FramePattern, ...] = (
    # Waiting for work: sleeping, event loops with nothing to do, accept(), joins.
    FramePattern(C.IDLE, source=r"\b(time\.)?sleep\(", leaf_only=True),
    FramePattern(C.IDLE, function=r"^(BaseSelector|\w*Selector)\.select$", file=r"selectors\.py$", leaf_only=True),
    FramePattern(C.IDLE, function=r"(^|\.)(serve_forever|_run_once|accept)$", leaf_only=True),
    FramePattern(C.IDLE, function=r"^(_worker|worker)$", file=r"concurrent/futures/thread\.py$", leaf_only=True),
    # Waiting on another thread: its result, its lock-free handoff, its end.
    FramePattern(C.HANDOFF, function=r"^Thread\.(join|_wait_for_tstate_lock)$", leaf_only=True),
    FramePattern(C.HANDOFF, function=r"^(Event\.wait|Condition\.wait|Queue\.get|SimpleQueue\.get|Future\.result)$",
                 leaf_only=True),
    # A keep-alive server thread reading the next request line waits for its client, not on IO.
    FramePattern(C.IDLE, function=r"(readinto|readline|recv_into|recv)$", parent=r"handle_one_request$", leaf_only=True),
    # Blocked on a socket, pipe or file.
    FramePattern(C.IO_WAIT, file=r"(^|/)(socket|ssl|http/client|urllib3/.*|requests/.*|asyncio/streams|aiohttp/.*)\.py$",
                 function=r"(read|recv|send|readinto|readline|connect|_read_status|begin|getresponse|urlopen|request|_safe_read)", leaf_only=True),
    FramePattern(C.IO_WAIT, source=r"\.(recv|recv_into|recvfrom|recvmsg|sendall|sendto|accept|connect|getresponse|urlopen)\(",
                 leaf_only=True),
    FramePattern(C.IO_MAYBE, source=r"\.(read|readinto|readline|readlines|write|send|flush)\(|\bos\.(read|pread|write)\(|\bopen\(",
                 leaf_only=True),
    # Lock / queue contention.
    FramePattern(C.LOCK_WAIT, source=r"\.acquire\(|(?i:^\s*(async\s+)?with\s+[\w.]*(lock|mutex|sem|semaphore)(_\w+)?(\(\))?\s*:)",
                 leaf_only=True),
    FramePattern(C.LOCK_WAIT, function=r"^(Lock|RLock|Semaphore|BoundedSemaphore|Barrier)\.", leaf_only=True),
    FramePattern(C.GC, source=r"\bgc\.collect\(", leaf_only=True),
    FramePattern(C.CUDA_SYNC, source=r"cuda\.synchronize\(|\.item\(\)|\.cpu\(\)|\.numpy\(\)", leaf_only=True),
    # Serialization.
    FramePattern(C.SERIALIZATION, file=r"(^|/)(json|pickle|copyreg|marshal|base64|_pickle|pickletools|csv)(/[\w]+)?\.py$"),
    FramePattern(C.SERIALIZATION, file=r"(^|/)(google/protobuf|msgpack|orjson|ujson|simplejson|pydantic(_core)?|msgspec|cloudpickle|yaml)/"),
    FramePattern(C.SERIALIZATION, source=r"\b(json|orjson|ujson|pickle|msgpack|marshal|base64|yaml)\.\w*(dump|load|encode|decode)\w*\(|SerializeToString\(|ParseFromString\(|model_dump(_json)?\(|\.tolist\(\)",
                 leaf_only=True),
    # Tokenization.
    FramePattern(C.TOKENIZATION, file=r"(^|/)(tokenizers|sentencepiece|tiktoken|transformers/tokenization_\w+|transformers/models/\w+/tokenization_\w+)"),
    FramePattern(C.TOKENIZATION, function=r"(^|\.)(tokenize|encode_batch|batch_encode_plus|encode_plus|apply_chat_template)$"),
    FramePattern(C.TOKENIZATION, source=r"\btokeni[sz]er(\.\w+)?\(|\.encode_batch\(|\.tokenize\(", leaf_only=True),
    # Decoding and transforming inputs (before the model: pre-processing, or a DataLoader's work).
    FramePattern(C.PREPROCESS, file=r"(^|/)(PIL|cv2|imageio|skimage|albumentations|librosa|soundfile|audioread|decord|av|turbojpeg|torchvision/(transforms|io)|torchaudio/(transforms|functional|io))/"),
    # Framework / numeric compute (the GIL is released inside).
    FramePattern(C.FRAMEWORK_COMPUTE, file=r"(^|/)(torch|numpy|scipy|sklearn|onnxruntime|tensorflow|jax|jaxlib|xgboost|lightgbm|transformers/models|vllm|tensorrt)/"),
    FramePattern(C.FRAMEWORK_COMPUTE, source=r"\b(torch|np|numpy|F|nn\.functional|scipy)\.\w+|\w\s*@\s*\w|\.(mm|bmm|matmul|conv\dd|forward|einsum|dot)\(|\bmodel\(",
                 leaf_only=True),
)

@dataclass(frozen=True)
class CallPath:
    """A frame that puts everything called from it in one ``context`` (regexes on the frame's
    function and file; both must match where given)."""

    context: str
    function: str | None = None
    file: str | None = None
    leaf_exempt: str | None = None  # a leaf in these files keeps its own category (regex on the leaf's file)


INPUT_PIPELINE, DATA_WORKER, LOOP_CALLBACK, MODEL = "input_pipeline", "data_worker", "loop_callback", "model"
CALL_PATHS: tuple[CallPath, ...] = (
    # The training loop taking its next batch: the fetch runs here (num_workers=0) or it waits for the workers.
    CallPath(INPUT_PIPELINE, r"^_(BaseDataLoaderIter\.__next__|SingleProcessDataLoaderIter\._next_data|"
                             r"MultiProcessingDataLoaderIter\._(next_data|get_data|try_get_data))$",
             r"torch/utils/data/dataloader\.py$"),
    # A DataLoader worker process (or the pin-memory thread): its waits are waiting for work.
    CallPath(DATA_WORKER, r"^_worker_loop$", r"torch/utils/data/_utils/worker\.py$"),
    CallPath(DATA_WORKER, r"^_pin_memory_loop$", r"torch/utils/data/_utils/pin_memory\.py$"),
    # An asyncio event loop running a callback or a coroutine's step: anything that waits in here, not in
    # the selector, blocks the loop and every request on it (a synchronous HTTP client, time.sleep, a lock).
    # asyncio's own socket calls (a transport's recv/send, sock_connect) never block: they are exempt.
    CallPath(LOOP_CALLBACK, r"^Handle\._run$", r"asyncio/events\.py$", leaf_exempt=r"(^|/)asyncio/"),
    # The model's forward (and what it calls): model work, whatever the library.
    CallPath(MODEL, r"^Module\._(wrapped_)?call_impl$", r"torch/nn/modules/module\.py$"),
)

# What a call path makes of the leaf's category (absent: the leaf's category stands).
_PARKED_OR_LOCK = (Category.IDLE, Category.HANDOFF, Category.LOCK_WAIT)
CONTEXT_CATEGORY: dict[str, dict[str, str]] = {
    INPUT_PIPELINE: {**{c: Category.INPUT_WAIT for c in _PARKED_OR_LOCK},
                     **{c: Category.INPUT_PIPELINE for c in (
                         Category.PREPROCESS, Category.FRAMEWORK_COMPUTE, Category.PYTHON, Category.SERIALIZATION,
                         Category.GC, Category.TOKENIZATION)}},  # file reads stay IO: the disk holds it back
    DATA_WORKER: {c: Category.INPUT_PIPELINE for c in (
        Category.PREPROCESS, Category.FRAMEWORK_COMPUTE, Category.PYTHON, Category.SERIALIZATION, Category.GC,
        Category.TOKENIZATION)},  # its waits for the next index stay waits for work
    LOOP_CALLBACK: {c: Category.LOOP_BLOCKED for c in (
        Category.IO_WAIT, Category.IO_MAYBE, Category.LOCK_WAIT, Category.IDLE, Category.HANDOFF)},
    MODEL: {Category.PREPROCESS: Category.FRAMEWORK_COMPUTE},
}

# A HANDOFF wait directly under one of these frames (only threading/queue internals between) is a
# pool thread waiting for its next work item, not for another thread's result: the account counts
# it as waiting for work. Regex (re.search) on "function (file)". A threading.Timer waiting for its
# time is no handoff either: the unbatched workload's shutdown timer counted 3.6 s a 4 s capture as
# requests queued behind the model worker.
WORK_LOOPS: tuple[str, ...] = (
    r"^_worker \(.*concurrent/futures/thread\.py\)$",
    r"^WorkerThread\.run \(.*anyio/",
    r"^Timer\.run \(.*threading\.py\)$",
)
SYNC_INTERNALS = r"(^|/)(threading|queue)\.py$"  # frames of the wait itself (Queue.get -> Condition.wait)

# Kernel wait channels (/proc/<pid>/task/<tid>/wchan) of a sleeping thread -> what it waits on.
WAIT_CHANNELS: tuple[tuple[str, str], ...] = (
    ("io_wait", r"sk_wait|wait_woken|tcp_|unix_stream|inet_|skb_|sock_|pipe_read|pipe_wait|io_schedule|blk|nfs|folio_wait|wait_on_page|ext4|xfs|fuse|bio"),
    ("event_wait", r"ep_poll|epoll|do_select|do_sys_poll|poll_schedule|core_sys_select"),
    ("lock_wait", r"futex"),
    ("sleep", r"nanosleep|hrtimer|schedule_timeout|do_wait|wait_woken_"),
)

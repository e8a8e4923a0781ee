"""Wait until no thread of the target is inside a torch op that began while the profiler recorded.

Why: with ``profile_all_threads`` torch records every thread's ops through a global RecordFunction
callback into per-thread queues, and ``disableProfiler()`` removes that callback and at once reads
and frees those queues (``RecordQueue::getRecords``), while ops that began before the removal still
run on other threads, without the GIL, and write their end into the same queues. That race is the
SIGSEGV/heap corruption the agent's windows caused (seen under gdb: one thread in
``ThreadLocalSubqueue::begin_op``, the stopping thread in ``getRecords`` -> ``malloc_consolidate``).
So a window is stopped in two steps: the callback is removed first (``_toggle_collection_dynamic``;
no new op is recorded after it), then this module waits until every op that could have begun
before is over, and only then torch finalizes.

An op is over for a thread once the frame that was on top of its stack when the callback went away
has moved past the instruction it was at, or returned. A thread may stay put without being in an op:
it is cleared at once when that instruction is a call this module can name as a standard-library
builtin (``time.sleep``, ``signal.pause``, ``select.select``), and after QUIET_S when its frame is
standard-library code and its CPU clock did not move meanwhile (blocked in a socket read, a lock, a
selector). Anything else is waited for. Standard library only (runs inside the target).
"""
from __future__ import annotations

import dis
import gc
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

POLL_S = 0.002
QUIET_S = 0.02  # a standard-library frame whose thread used no CPU for this long is blocked, not in an op
_STDLIB = tuple(p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p)
_SITE = tuple(p for p in {sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")} if p)
_CALLS = {"CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW", "CALL_FUNCTION_KW"}
_SKIP = {"PRECALL", "KW_NAMES", "CACHE", "EXTENDED_ARG"}
_ROOTS = {"LOAD_GLOBAL", "LOAD_NAME"}
_LOCAL_ROOTS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF"}
_ATTRS = {"LOAD_ATTR", "LOAD_METHOD"}


@dataclass
class _Pending:
    name: str
    frame: types.FrameType
    lasti: int
    cpu_clock: int | None
    cpu_ns: int | None
    since: float


@dataclass(frozen=True)
class Quiet:
    """How the wait ended: ``waited_s`` (s), and the threads still possibly in an op (``left``:
    'name at file:line'), empty when every op that could have begun before is over."""

    waited_s: float
    left: tuple[str, ...] = ()
    cleared: dict[str, int] = field(default_factory=dict)  # how threads were cleared, by reason

    @property
    def ok(self) -> bool:
        return not self.left


def wait_quiet(timeout_s: float, exclude: Iterable[int] = ()) -> Quiet:
    """Poll every POLL_S (sleeping, so the target runs) until no thread but ``exclude`` (thread
    idents; the caller's own thread always) may still be in an op that began before the call, or
    ``timeout_s`` (s) passed. Never raises for a thread that exits meanwhile."""
    t0 = time.monotonic()
    skip = {threading.get_ident(), *exclude}
    pending = {ident: p for ident, frame in current_frames().items()
               if ident not in skip and (p := _pending(ident, frame, t0)) is not None}
    cleared: dict[str, int] = {}
    while True:
        now = time.monotonic()
        frames = current_frames()
        for ident in list(pending):
            reason = _cleared(pending[ident], frames.get(ident), now)
            if reason:
                cleared[reason] = cleared.get(reason, 0) + 1
                del pending[ident]
        if not pending or now - t0 >= timeout_s:
            return Quiet(round(now - t0, 6), tuple(_where(p) for p in pending.values()), cleared)
        time.sleep(POLL_S)


def current_frames() -> dict[int, types.FrameType]:
    """``sys._current_frames()`` with the cyclic GC off during the call.

    On CPython 3.11 the call holds the runtime's thread-list lock while it allocates frame objects.
    An allocation can start a collection, and a finalizer it runs may release the GIL (a torch
    tensor's does); a thread that exits meanwhile takes the GIL, then waits for that lock, and the
    whole target hangs (python/cpython#106883; 3.12+ collects only between bytecodes). It hung 3 of
    4 targets running 300 windows each beside threads that start and end. The target's own GC setting
    is kept; only a thread switch between the two calls here could let it change in between."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def _pending(ident: int, frame: types.FrameType | None, now: float) -> _Pending | None:
    if frame is None or frame.f_lasti < 0:
        return None
    name = next((t.name for t in threading.enumerate() if t.ident == ident), f"thread {ident}")
    clock = _cpu_clock(ident)
    return _Pending(name, frame, frame.f_lasti, clock, _cpu_ns(clock), now)


def _cleared(p: _Pending, top: types.FrameType | None, now: float) -> str | None:
    """Why the thread is clear of ops begun before the wait, or None while it may not be."""
    if top is None:
        return "exited"
    if not _on_stack(p.frame, top) or p.frame.f_lasti != p.lasti:
        return "moved"
    if top is p.frame and _stdlib_builtin_call(p.frame, p.lasti):
        return "standard-library call"
    if top is p.frame and _is_stdlib(p.frame.f_code.co_filename) and now - p.since >= QUIET_S:
        cpu = _cpu_ns(p.cpu_clock)
        if cpu is None or p.cpu_ns is None:
            return "exited" if cpu is None and p.cpu_clock is not None else None
        if cpu == p.cpu_ns:
            return "blocked"
        p.cpu_ns, p.since = cpu, now  # it computes: watch the next interval
    return None


def _on_stack(frame: types.FrameType, top: types.FrameType) -> bool:
    f: types.FrameType | None = top
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _cpu_clock(ident: int) -> int | None:
    try:
        return time.pthread_getcpuclockid(ident)
    except (OSError, AttributeError, OverflowError):
        return None


def _cpu_ns(clock: int | None) -> int | None:
    if clock is None:
        return None
    try:
        return time.clock_gettime_ns(clock)
    except OSError:
        return None


def _is_stdlib(path: str) -> bool:
    return path.startswith(_STDLIB) and not path.startswith(_SITE)


def _where(p: _Pending) -> str:
    return f"{p.name} at {p.frame.f_code.co_filename}:{p.frame.f_lineno}"


@lru_cache(maxsize=512)
def _instructions(code: types.CodeType) -> tuple[dis.Instruction, ...]:
    return tuple(dis.get_instructions(code))


def callee_path(code: types.CodeType, lasti: int) -> tuple[str, ...] | None:
    """What a call at byte offset ``lasti`` calls, when the callee is a name with attributes:
    ``("global", "time", "sleep")``, or ``("", "sock", "recv")`` for a local; None when that cannot
    be read off the bytecode (a computed callee, arguments with jumps)."""
    ins = _instructions(code)
    at = next((k for k, x in enumerate(ins) if x.offset == lasti), None)
    argc = ins[at].arg if at is not None and ins[at].opname in _CALLS else None
    if at is None or not isinstance(argc, int):
        return None
    start = _args_start(ins, at - 1, argc + (1 if ins[at].opname == "CALL_KW" else 0))
    if start is None:
        return None
    i = start - 1
    while i >= 0 and ins[i].opname == "PUSH_NULL":  # 3.13+ pushes the NULL after the callee
        i -= 1
    names: list[str] = []
    while i >= 0 and ins[i].opname in _ATTRS:
        names.append(str(ins[i].argval))
        i -= 1
    if i < 0 or ins[i].opname not in _ROOTS | _LOCAL_ROOTS:
        return None
    return ("" if ins[i].opname in _LOCAL_ROOTS else "global", str(ins[i].argval), *reversed(names))


def _args_start(ins: tuple[dis.Instruction, ...], i: int, args: int) -> int | None:
    """Index of the first instruction of the ``args`` arguments that end at index ``i``: walking
    back, the first point where the instructions pushed ``args`` values net (a proper suffix of
    one argument's code pushes at most nothing net); None across a jump."""
    while i >= 0 and ins[i].opname in _SKIP:  # the call's own PRECALL/KW_NAMES (3.11)
        i -= 1
    if args == 0:
        return i + 1
    pushed = 0
    while i >= 0:
        x = ins[i]
        if "JUMP" in x.opname or x.is_jump_target:
            return None
        try:
            pushed += dis.stack_effect(x.opcode, x.arg, jump=False) if x.arg is not None \
                else dis.stack_effect(x.opcode)
        except ValueError:
            return None
        if pushed == args:
            return i
        i -= 1
    return None


def _stdlib_builtin_call(frame: types.FrameType, lasti: int) -> bool:
    """The pending call is a builtin of a standard-library module or a method of one of its types
    (``time.sleep``, ``conn.recv`` on a socket), found without running the target's code: names
    are read from the frame's globals or locals (the thread is parked in C code meanwhile: its
    locals cannot change under the GIL this thread holds), attributes from dictionaries."""
    path = callee_path(frame.f_code, lasti)
    if not path:
        return False
    scope, root = path[0], path[1]
    if scope:
        globals_ = frame.f_globals
        builtins_ = globals_.get("__builtins__")
        space = builtins_ if isinstance(builtins_, dict) else vars(builtins_) if builtins_ is not None else {}
        obj = globals_.get(root, space.get(root))
    else:
        obj = frame.f_locals.get(root)
    for attr in path[2:]:
        obj = _static_attr(obj, attr)
    if isinstance(obj, types.BuiltinFunctionType):
        owner = getattr(obj, "__self__", None)  # a bound method of a C object: its type's module
        module = getattr(obj, "__module__", None) if owner is None or isinstance(owner, types.ModuleType) \
            else getattr(type(owner), "__module__", None)
    elif isinstance(obj, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        module = getattr(obj.__objclass__, "__module__", None)
    else:
        return False
    return isinstance(module, str) and module.partition(".")[0] in sys.stdlib_module_names


def _static_attr(obj: object, attr: str) -> object:
    """``obj.attr`` without running code: module dictionaries, else inspect.getattr_static."""
    if isinstance(obj, types.ModuleType):
        return vars(obj).get(attr)
    import inspect

    try:
        return inspect.getattr_static(obj, attr, None)
    except Exception:  # a hostile __mro__ or __dict__: not a call this module can name
        return None


__all__ = ["POLL_S", "QUIET_S", "Quiet", "callee_path", "current_frames", "wait_quiet"]

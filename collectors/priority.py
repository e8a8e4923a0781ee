"""Collectors run at the host's lowest CPU priority, so a saturated target keeps its cores.

``lower_this_thread()`` puts the calling thread under SCHED_IDLE (it runs only when a core would
otherwise idle: sched(7)), or where that is refused at nice 19; a child process started from that
thread afterwards (py-spy) inherits it, as fork(2) copies the calling thread's policy and nice
value. The price is sampling gaps on a saturated host: py-spy then waits for a free core, which
the report's py-spy rate and window gaps show. Only the collector threads are lowered: the capture
loop, the analysis and the live view keep their priority, so the verdict is not delayed. When the
capture stops, ``restore_all()`` gives the lowered threads (and ``restore_process`` a py-spy child) the
normal priority back: on a saturated host a thread under SCHED_IDLE would otherwise not get the
core to write its last window before the capture gives up on it (needs root, or an RLIMIT_NICE
that allows it; where refused the stop simply waits its timeout, as before).
"""
from __future__ import annotations

import os
import threading

SCHED_IDLE = "SCHED_IDLE"
NICE_19 = "nice 19"
_applied: dict[str, str] = {}  # thread name -> what it got, for the manifest's cost section
_lowered: set[int] = set()  # native thread ids lowered and not yet restored
_lock = threading.Lock()


def lower_this_thread() -> str:
    """Lower the calling thread: SCHED_IDLE, else nice 19; returns what it got (or why it kept
    its priority). Never raises."""
    how: str
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: the calling thread (Linux)
        how = SCHED_IDLE
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # Linux: per thread
            how = NICE_19
        except (AttributeError, OSError) as exc:
            how = f"unchanged ({type(exc).__name__}: {exc})"
    with _lock:
        _applied[threading.current_thread().name] = how
        if how in (SCHED_IDLE, NICE_19):
            _lowered.add(threading.get_native_id())
    return how


def restore(tid: int) -> bool:
    """Thread (or process) ``tid`` back to SCHED_OTHER at nice 0; False where refused or gone."""
    try:
        os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, tid, 0)
        return True
    except (AttributeError, OSError):
        return False


def restore_process(pid: int) -> None:
    """Every thread of child process ``pid`` (py-spy's sampler threads inherited the policy too)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        tids = [pid]
    for tid in tids:
        restore(tid)


def restore_all() -> None:
    """Every thread ``lower_this_thread`` lowered, back to the normal priority (the capture stops)."""
    with _lock:
        tids = list(_lowered)
        _lowered.clear()
    for tid in tids:
        restore(tid)


def applied() -> dict[str, str]:
    """What each lowered thread got so far (thread name -> SCHED_IDLE, nice 19 or why not)."""
    with _lock:
        return dict(_applied)


def reset() -> None:
    """Forget the record (a new capture in the same process)."""
    with _lock:
        _applied.clear()
        _lowered.clear()


__all__ = ["NICE_19", "SCHED_IDLE", "applied", "lower_this_thread", "reset", "restore", "restore_all",
           "restore_process"]

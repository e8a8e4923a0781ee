"""Collectors run at nice 19, so a saturated target keeps its cores (and, as root, the analysis
imports made during the capture: diagnose/pipeline.py).

py-spy (the largest cost) and the collector threads are lowered to nice 19: a CPU-bound thread at
nice 0 then gets about 98.5% of a core it shares with one of them (CFS weights 1024 against 15,
sched(7)), yet the collectors still run. SCHED_IDLE was tried and refused: on a saturated host it
left the collectors no core at all (NVML polls and py-spy windows lost, a stopping capture waiting
on a thread that never ran).

``lower_this_thread()`` sets the calling thread's nice value (Linux keeps one per thread); a child
process started from that thread afterwards (py-spy) inherits it, as fork(2) copies the calling
thread's nice value. Only the samplers are lowered: the process and py-spy collectors and the py-spy
windows. The OTLP receiver and its decoder child keep their priority, as the capture loop, the
analysis and the live view do: the target's exporter waits on each answer, and at nice 19 on a
saturated host the answers came after the exporter's timeout and the target dropped its batches.
The probe's one ``py-spy dump`` before the capture keeps its priority too (at nice 19 on a saturated
host its symbol loading could outlast the probe's timeout, and py-spy would be given up). When the
capture stops, ``restore_all()`` gives the lowered threads (and ``restore_process`` a py-spy child)
nice 0 back, so they write their last window promptly (needs root, or an RLIMIT_NICE that allows
it; where refused the stop simply waits its timeout, as before).
"""
from __future__ import annotations

import os
import threading

NICE_19 = "nice 19"
_applied: dict[str, str] = {}  # thread name -> what it got, for the manifest's cost section
_lowered: set[int] = set()  # native thread ids lowered and not yet restored
_lock = threading.Lock()


def lower_this_thread(record: bool = True) -> str:
    """Lower the calling thread to nice 19; returns what it got (or why it kept its priority).
    ``record``: for the manifest and ``restore_all`` (a sampler); the caller restores it otherwise.
    Never raises."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # Linux: per thread
        how = NICE_19
    except (AttributeError, OSError) as exc:
        how = f"unchanged ({type(exc).__name__}: {exc})"
    if not record:
        return how
    with _lock:
        _applied[threading.current_thread().name] = how
        if how == NICE_19:
            _lowered.add(threading.get_native_id())
    return how


def restore(tid: int) -> bool:
    """Thread (or process) ``tid`` back to nice 0; False where refused or gone."""
    try:
        os.setpriority(os.PRIO_PROCESS, tid, 0)
        return True
    except (AttributeError, OSError):
        return False


def restore_process(pid: int) -> None:
    """Every thread of child process ``pid`` (py-spy's sampler threads inherited the nice value too)."""
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
    """What each lowered thread got so far (thread name -> nice 19 or why not)."""
    with _lock:
        return dict(_applied)


def reset() -> None:
    """Forget the record (a new capture in the same process)."""
    with _lock:
        _applied.clear()
        _lowered.clear()


__all__ = ["NICE_19", "applied", "lower_this_thread", "reset", "restore", "restore_all", "restore_process"]

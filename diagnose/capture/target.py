"""The process being diagnosed: resolved from /proc (the Target record: diagnose/model.py; its attach
lock: attach_lock.py)."""
from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from diagnose.model import Target

T = TypeVar("T")


class TargetError(Exception):
    """The target cannot be captured (no such pid, already attached). One line, exit code 2."""


def resolve_target(pid: int) -> Target:
    """Describe the live process ``pid``. Raises TargetError if it does not exist."""
    import psutil

    if pid <= 0:
        raise TargetError(f"invalid pid {pid}: give the pid of a running process (see `ps aux`)")
    if pid == os.getpid():
        raise TargetError(f"pid {pid} is this diagnose process; give the pid of the service")
    _refuse_non_process(pid)
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name()
            create_time = p.create_time()
            uid = p.uids().real
            username = _safe(p.username, str(uid))
            exe = _safe(p.exe, "")
            cmdline: tuple[str, ...] = tuple(_safe(p.cmdline, []))
            if p.status() == psutil.STATUS_ZOMBIE:
                raise TargetError(f"pid {pid} has exited (zombie); start the service and retry")
    except psutil.NoSuchProcess:
        raise TargetError(f"no process with pid {pid}; check the pid with `ps aux`") from None
    return Target(pid, name, exe, cmdline, username, uid, create_time, platform.node())


PF_KTHREAD = 0x00200000  # include/linux/sched.h: task flag of kernel threads


def _refuse_non_process(pid: int) -> None:
    """Thread ids and kernel threads look like pids to psutil; neither can be profiled."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(errors="replace")
        stat_fields = Path(f"/proc/{pid}/stat").read_text(errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return  # not Linux, or gone: psutil gives the precise error
    tgid = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("Tgid:")), str(pid))
    if tgid != str(pid):
        raise TargetError(f"{pid} is a thread of process {tgid}, not a process; attach to {tgid}")
    if len(stat_fields) > 6 and int(stat_fields[6]) & PF_KTHREAD:
        raise TargetError(f"pid {pid} is a kernel thread: nothing to profile; give the pid of a user-space process")


def _safe(fn: Callable[[], T], default: T) -> T:
    import psutil

    try:
        return fn()
    except psutil.Error:
        return default

"""The process being diagnosed: identification, liveness and the one-capture-per-pid lock."""
from __future__ import annotations

import fcntl
import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


class TargetError(Exception):
    """The target cannot be captured (no such pid, already attached). One line, exit code 2."""


@dataclass(frozen=True)
class Target:
    pid: int
    name: str
    exe: str
    cmdline: tuple[str, ...]
    username: str
    uid: int
    create_time: float
    host: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": self.name,
            "exe": self.exe,
            "cmdline": list(self.cmdline),
            "user": self.username,
            "uid": self.uid,
            "create_time": self.create_time,
            "host": self.host,
        }

    def alive(self) -> bool:
        """True while the same process (pid and start time) still runs and is not a zombie."""
        try:
            p = psutil.Process(self.pid)
            return p.create_time() == self.create_time and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


def resolve_target(pid: int) -> Target:
    """Describe the live process ``pid``. Raises TargetError if it does not exist."""
    if pid <= 0:
        raise TargetError(f"invalid pid {pid}: give the pid of a running process (see `ps aux`)")
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name()
            create_time = p.create_time()
            uid = p.uids().real
            username = _safe(p.username, str(uid))
            exe = _safe(p.exe, "")
            cmdline = tuple(_safe(p.cmdline, []))
            if p.status() == psutil.STATUS_ZOMBIE:
                raise TargetError(f"pid {pid} has exited (zombie); start the service and retry")
    except psutil.NoSuchProcess:
        raise TargetError(f"no process with pid {pid}; check the pid with `ps aux`") from None
    return Target(pid, name, exe, cmdline, username, uid, create_time, platform.node())


def _safe(fn, default):
    try:
        return fn()
    except psutil.Error:
        return default


def runtime_dir() -> Path:
    """Per-user runtime directory (0700): $XDG_RUNTIME_DIR/diagnose or <tmp>/diagnose-<uid>."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "diagnose" if base else Path(tempfile.gettempdir()) / f"diagnose-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise TargetError(f"{path} belongs to uid {st.st_uid}, not to you; remove it or set XDG_RUNTIME_DIR")
    os.chmod(path, 0o700)
    return path


class AttachLock:
    """An exclusive flock on ``attach-<pid>.lock``: one capture per target at a time.

    The kernel drops the lock when the holder dies, so a crashed capture never blocks the next.
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.path = runtime_dir() / f"attach-{pid}.lock"
        self._fd: int | None = None

    def __enter__(self) -> "AttachLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise TargetError(
                f"another diagnose capture (pid {holder}) is already attached to pid {self.pid}; "
                "wait for it to finish or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

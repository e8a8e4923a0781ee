"""The process being diagnosed: identification, liveness and the one-capture-per-pid lock."""
from __future__ import annotations

import os
import platform
import socket
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


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

    def thread_count(self) -> int:
        """The target's threads now (1 when it cannot be read): the overhead budget's first plan."""
        import psutil

        try:
            return int(psutil.Process(self.pid).num_threads())
        except psutil.Error:
            return 1

    def alive(self) -> bool:
        """True while the same process (pid and start time) still runs and is not a zombie."""
        import psutil  # lazy: the in-process agent imports this module in targets without psutil

        try:
            p = psutil.Process(self.pid)
            return bool(p.create_time() == self.create_time and p.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False


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


def runtime_dir() -> Path:
    """Per-user runtime directory (0700): $XDG_RUNTIME_DIR/diagnose or <tmp>/diagnose-<uid>.

    Safe in a world-writable /tmp: a symlink or another user's directory is refused, never
    followed or chmod-ed. $XDG_RUNTIME_DIR is used only when it belongs to this uid (``sudo -E``
    keeps the invoking user's). Raises TargetError.
    """
    uid = os.getuid()
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and _owned_by(Path(base), uid):
        path = Path(base) / "diagnose"
    else:
        path = Path(tempfile.gettempdir()) / f"diagnose-{uid}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise TargetError(f"cannot create {path}: {exc.strerror}; set XDG_RUNTIME_DIR to a private directory") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise TargetError(f"{path} is not a directory (a symlink?); remove it or set XDG_RUNTIME_DIR")
    if st.st_uid != uid:
        raise TargetError(f"{path} belongs to uid {st.st_uid}, not to you; remove it or set XDG_RUNTIME_DIR")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _owned_by(path: Path, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid


class AttachLock:
    """One capture per target at a time, for every user: a bound abstract Unix socket named after
    the pid. The kernel releases it when the holder exits or dies, and it leaves no file behind
    (no lock directory to pre-create or redirect, whatever $TMPDIR or $XDG_RUNTIME_DIR say).
    """

    def __init__(self, pid: int):
        self.pid = pid
        self._sock: socket.socket | None = None

    def __enter__(self) -> AttachLock:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0diagnose-attach-{self.pid}")
        except OSError:
            sock.close()
            raise TargetError(
                f"another diagnose capture is already attached to pid {self.pid}; "
                "wait for it to finish or stop it"
            ) from None
        self._sock = sock
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

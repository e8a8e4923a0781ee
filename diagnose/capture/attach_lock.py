"""One capture per target at a time, and no other user can take that lock away.

Two locks, held together for the whole capture:

- the abstract Unix socket ``@diagnose-attach-<pid>``, bound and listening: shared by every user,
  so root and the target's owner exclude each other; the kernel releases it when its holder exits
  or dies (nothing stale, nothing on disk). Any local user can bind that name first, so when it is
  taken the holder is identified: connect and read SO_PEERCRED, or, when it does not accept (it
  only bound the name, or its backlog is full), find the process holding the socket's inode in
  ``/proc``. A holder of our uid or root is a capture: refused. Anyone else (the target's own uid
  included, when we are root: a hostile target must not be able to stop its own diagnosis) is a
  squatter: one warning line naming its pid and uid, and the capture goes on under the second lock;
- a ``flock`` on ``attach-<pid>.lock`` in our private runtime directory (diagnose.agent.inproc.rundir),
  which no other user can create, open or lock.

Trade-off, documented: while the socket name is squatted, root and the target's owner attaching the
same pid no longer exclude each other (each holds only its own file lock); the agent still refuses a
second concurrent capture (``busy``). When our runtime directory is itself unusable (squatted), the
socket alone is the lock; when both are unusable, attach fails naming both causes.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from diagnose.agent.inproc.server import peer_credentials
from diagnose.capture.target import TargetError

BUSY_RETRIES = 3  # a genuine holder listens right after it binds: ask again before judging it
BUSY_RETRY_S = 0.03
_LISTEN_BACKLOG = 16


def socket_name(pid: int) -> str:
    return f"\0diagnose-attach-{pid}"


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")


class AttachLock:
    """Context manager; ``__enter__`` raises TargetError (one line, exit code 2) when another
    capture holds the target, or when no lock at all can be taken."""

    def __init__(self, pid: int, warn: Callable[[str], None] = _stderr):
        self.pid = pid
        self.warn = warn
        self._sock: socket.socket | None = None
        self._file: tuple[int, Path] | None = None

    def __enter__(self) -> AttachLock:
        squatter = self._take_socket()
        try:
            self._file = _take_file(self.pid)
        except _FileLockUnavailable as exc:
            if squatter is not None:
                raise TargetError(f"{squatter}, and {exc}") from None
            # the socket alone: our runtime directory must not decide whether we may attach
        except TargetError:
            self.__exit__()
            raise
        if squatter is not None and self._file is not None:
            self.warn(f"diagnose: warning: {squatter}: ignored; locking with {self._file[1]} instead")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            fd, path = self._file
            self._file = None
            with contextlib.suppress(OSError):  # ours, still locked: a waiter re-checks the inode
                os.unlink(path)
            os.close(fd)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _take_socket(self) -> str | None:
        """Bind the shared name; None when bound, else why the holder is a squatter (raises
        TargetError when it is a capture)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(socket_name(self.pid))
            sock.listen(_LISTEN_BACKLOG)
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise TargetError(f"cannot take the attach lock of pid {self.pid}: {exc.strerror}") from None
            return self._judge_holder()
        self._sock = sock
        return None

    def _judge_holder(self) -> str:
        holder = _holder(self.pid)
        # root or ourselves: a capture. The target's uid is not trusted by root: a hostile target (or a
        # sibling of it) holding the name would otherwise stop root from ever diagnosing it
        allowed = {os.getuid(), 0}
        if holder is not None and holder[1] in allowed and holder[0] != self.pid:
            raise TargetError(f"another diagnose capture (pid {holder[0]}, uid {holder[1]}) is already "
                              f"attached to pid {self.pid}; wait for it to finish or stop it")
        who = f"pid {holder[0]} (uid {holder[1]})" if holder else "a process diagnose cannot identify"
        return (f"the attach lock of pid {self.pid} (abstract socket @{socket_name(self.pid)[1:]}) is held by "
                f"{who}, not by a capture of root or uid {os.getuid()}")


def _holder(pid: int) -> tuple[int, int] | None:
    """(pid, uid) of the process holding the name: its credentials if it accepts connections, else
    the owner of its socket's inode in /proc (all processes for root, our own otherwise)."""
    for attempt in range(BUSY_RETRIES):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        conn.setblocking(False)  # a full backlog (a squatter filling its own) must not hang us
        try:
            conn.connect(socket_name(pid))
            peer = peer_credentials(conn)
            return peer["pid"], peer["uid"]
        except OSError:
            pass
        finally:
            conn.close()
        if attempt + 1 < BUSY_RETRIES:
            time.sleep(BUSY_RETRY_S)
    return _inode_holder(_abstract_inode(socket_name(pid)))


def _abstract_inode(name: str) -> int | None:
    """The inode of the socket bound to abstract ``name`` (``@name`` in /proc/net/unix)."""
    wanted = "@" + name[1:]
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as fh:
            next(fh, None)
            for line in fh:
                fields = line.split(None, 7)
                if len(fields) == 8 and fields[7].rstrip("\n") == wanted:
                    return int(fields[6])
    except (OSError, ValueError):
        return None
    return None


def _inode_holder(inode: int | None) -> tuple[int, int] | None:
    if inode is None:
        return None
    link = f"socket:[{inode}]"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
            if any(_readlink(f"/proc/{entry.name}/fd/{fd}") == link for fd in fds):
                return int(entry.name), os.stat(f"/proc/{entry.name}").st_uid
        except OSError:  # gone, or another user's (not root)
            continue
    return None


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


class _FileLockUnavailable(Exception):
    pass


def _take_file(pid: int) -> tuple[int, Path]:
    """flock ``attach-<pid>.lock`` in our runtime directory. Raises TargetError when another
    capture of ours holds it, _FileLockUnavailable when the directory cannot be used."""
    from diagnose.agent.inproc.rundir import RuntimeDirError, runtime_dir

    try:
        path = runtime_dir() / f"attach-{pid}.lock"
    except RuntimeDirError as exc:
        raise _FileLockUnavailable(str(exc)) from None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _FileLockUnavailable(f"cannot open {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TargetError(f"another diagnose capture is already attached to pid {pid} ({path} is "
                              "locked); wait for it to finish or stop it") from None
        # the previous holder unlinks the file as it leaves: keep the lock only on the file still there
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, path
        os.close(fd)

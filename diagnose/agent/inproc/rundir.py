"""diagnose's private runtime directory (agent sockets, staging, attach locks): one per uid, 0700,
never at a name that another user could take first.

Chosen in this order by ``choose`` (a pure function of the uid, the environment and who owns what,
so the attach side can tell where a target's agent would have put its socket):

1. ``$XDG_RUNTIME_DIR/diagnose`` when ``$XDG_RUNTIME_DIR`` is a real directory owned by the uid that
   no one else may write (``sudo -E`` keeps the invoking user's: ignored then, since root does not own it);
2. for root, ``/run/diagnose`` (``/run`` is root's, not writable by others): never a predictable
   name in world-writable ``/tmp``;
3. otherwise ``<tmp>/diagnose-<uid>`` (``$TMPDIR``, else ``/tmp``; its sticky bit keeps others from
   renaming or deleting it once it is ours).

The last component is created and checked relative to the parent's descriptor without following
symlinks: a symlink, a file or another uid's directory there is *squatted* and refused with a
message naming its owner and the fix. diagnose never follows, chmods or deletes what it finds there.
"""
from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT_PARENT = Path("/run")  # root's parent directory (tests point it elsewhere)
NAME = "diagnose"
TMP_VARS = ("TMPDIR", "TEMP", "TMP")  # what tempfile.gettempdir() reads, in its order
FIX = "remove it (after checking what it is) or set XDG_RUNTIME_DIR to a private directory"


class RuntimeDirError(Exception):
    """The runtime directory cannot be used (squatted, not creatable). One line: the agent refuses to
    start (AgentError), the attach lock falls back to its socket alone (capture/attach_lock.py)."""


@dataclass(frozen=True)
class RuntimeDir:
    """Where the directory of ``uid`` lives: ``parent / name``."""

    parent: Path
    name: str
    uid: int

    @property
    def path(self) -> Path:
        return self.parent / self.name


def choose(uid: int, env: Mapping[str, str], tmp: str | None = None) -> RuntimeDir:
    """The runtime directory a process of ``uid`` with environment ``env`` uses (``tmp``: its
    temporary directory when known, else guessed from ``env``). Reads owners only; creates nothing."""
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg) and _private_to(Path(xdg), uid):
        return RuntimeDir(Path(xdg), NAME, uid)
    if uid == 0 and _private_to(ROOT_PARENT, 0):
        return RuntimeDir(ROOT_PARENT, NAME, uid)
    return RuntimeDir(Path(tmp or _guess_tmp(env)), f"{NAME}-{uid}", uid)


def runtime_dir() -> Path:
    """This process's runtime directory, created 0700 if absent. Raises RuntimeDirError when
    it is squatted or cannot be created."""
    return ensure(choose(os.getuid(), os.environ, tempfile.gettempdir()))


def ensure(where: RuntimeDir) -> Path:
    """Create ``where`` (0700) unless it exists, then check it is a real directory of its uid
    (a lax mode of our own directory is tightened). Raises RuntimeDirError."""
    try:
        parent = os.open(where.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise RuntimeDirError(f"cannot open {where.parent}: {exc.strerror}; "
                              "set XDG_RUNTIME_DIR to a private directory") from None
    try:
        try:
            os.mkdir(where.name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RuntimeDirError(f"cannot create {where.path}: {exc.strerror}; "
                                  "set XDG_RUNTIME_DIR to a private directory") from None
        _check_and_tighten(parent, where)
    finally:
        os.close(parent)
    return where.path


def squatted(where: RuntimeDir) -> str | None:
    """Why ``where`` cannot be used by its uid (squatted), or None if it is absent or fine."""
    try:
        st = os.lstat(where.path)
    except OSError:
        return None
    return _squat_reason(where, st)


def _check_and_tighten(parent: int, where: RuntimeDir) -> None:
    reason = _squat_reason(where, os.stat(where.name, dir_fd=parent, follow_symlinks=False))
    if reason is not None:
        raise RuntimeDirError(reason)
    try:  # opened without following: what is checked is what was opened
        fd = os.open(where.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        raise RuntimeDirError(f"{where.path} changed while diagnose checked it ({exc.strerror}); {FIX}") from None
    try:
        st = os.fstat(fd)
        reason = _squat_reason(where, st)
        if reason is not None:
            raise RuntimeDirError(reason)
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _squat_reason(where: RuntimeDir, st: os.stat_result) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "a file"
        return (f"{where.path} is not a directory ({kind}): squatted by uid {st.st_uid}; {FIX}")
    if st.st_uid != where.uid:
        return (f"{where.path} is squatted by uid {st.st_uid} (a directory that uid {where.uid} does not own); "
                f"{FIX}")
    return None


def _private_to(path: Path, uid: int) -> bool:
    """A real directory (no symlink) owned by ``uid`` that neither its group nor others may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022


def _guess_tmp(env: Mapping[str, str]) -> str:
    for var in TMP_VARS:
        value = env.get(var, "")
        if os.path.isabs(value) and os.path.isdir(value):
            return value
    return "/tmp"

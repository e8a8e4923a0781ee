"""Source lines of the target's frames, read only where the target itself could read them.

py-spy reports the file and line of each frame; the file name comes from the target (any string:
``exec(compile(src, "/root/.ssh/id_rsa", "exec"))``), and diagnose usually runs as root. A line is
read only from a regular file of bounded size that the target's own credentials (fsuid, fsgid and
supplementary groups, from /proc/<pid>/status) may read, under directories they may search,
resolved inside the target's root (``/proc/<pid>/root``) one component at a time, symlinks
followed as the kernel would but with every directory actually traversed checked, never through
``..``. Root's rights add
nothing: a file the target could not open yields no line. POSIX mode bits only: an ACL that grants
the target more is not honoured (a line missing, never a line leaked).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

MAX_SOURCE_BYTES = 8 << 20


@dataclass(frozen=True)
class Credentials:
    """What the kernel checks a file access of the target against (``Uid:``/``Gid:`` fs fields,
    ``Groups:`` of /proc/<pid>/status)."""

    uid: int
    gids: frozenset[int]

    @classmethod
    def of(cls, pid: int) -> Credentials | None:
        """The target's credentials; None when /proc cannot say (gone, not Linux)."""
        try:
            with open(f"/proc/{pid}/status", "rb") as fh:
                fields = dict(ln.split(b":", 1) for ln in fh.read(1 << 16).splitlines() if b":" in ln)
            uid = int(fields[b"Uid"].split()[3])
            gids = {int(fields[b"Gid"].split()[3]), *(int(g) for g in fields.get(b"Groups", b"").split())}
        except (OSError, KeyError, IndexError, ValueError):
            return None
        return cls(uid, frozenset(gids))

    def may(self, st: os.stat_result, bit_user: int, bit_group: int, bit_other: int) -> bool:
        if self.uid == 0:
            return True  # a root target could open it itself
        if st.st_uid == self.uid:
            return bool(st.st_mode & bit_user)
        if st.st_gid in self.gids:
            return bool(st.st_mode & bit_group)
        return bool(st.st_mode & bit_other)


def read_source(pid: int, filename: str, creds: Credentials | None) -> list[str] | None:
    """The lines of ``filename`` as the target ``pid`` sees it, or None (not absolute, ``..``, not a
    regular file, over MAX_SOURCE_BYTES, or not readable with the target's credentials)."""
    if creds is None or not filename.startswith("/") or "\0" in filename:
        return None
    try:
        fd = _open_as(pid, filename, creds)
    except OSError:
        return None
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES
                or not creds.may(st, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)):
            return None
        return fh.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace").splitlines()


def _open_as(pid: int, filename: str, creds: Credentials) -> int | None:
    """Resolve ``filename`` inside the target's root as the kernel would, one component at a
    time (O_NOFOLLOW; a symlink's target read and walked in its turn, from the target's root when
    absolute), checking search permission for ``creds`` on every directory actually traversed:
    a link cannot lead past a directory the target may not enter. None: ``..``, too many links."""
    root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    fd = os.dup(root)
    parts = [c for c in filename.split("/") if c and c != "."]
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == "..":
                return None
            if not creds.may(os.fstat(fd), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                return None
            st = os.lstat(name, dir_fd=fd)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > 40:
                    return None
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.dup(root)
                parts[:0] = [c for c in target.split("/") if c and c != "."]
                continue
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if parts else os.O_NONBLOCK | os.O_NOCTTY)
            nxt = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        out, fd = fd, -1
        return out
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(root)


__all__ = ["MAX_SOURCE_BYTES", "Credentials", "read_source"]

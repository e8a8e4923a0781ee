"""Source lines of the target's frames, read only where the target itself could read them.

py-spy reports the file and line of each frame; the file name comes from the target (any string:
``exec(compile(src, "/root/.ssh/id_rsa", "exec"))``), and diagnose usually runs as root. A line is
read only from a regular file of bounded size that the target's own credentials (fsuid, fsgid and
supplementary groups, from /proc/<pid>/status) may read, under directories they may search,
resolved inside the target's root (``/proc/<pid>/root``), never through ``..``. Root's rights add
nothing: a file the target could not open yields no line. POSIX mode bits only: an ACL that grants
the target more is not honoured (a line missing, never a line leaked).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

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
    path = PurePosixPath(filename)
    if creds is None or not path.is_absolute() or ".." in path.parts or "\0" in filename:
        return None
    root = f"/proc/{pid}/root"
    try:
        for parent in reversed(path.parents):  # every directory on the way must be searchable by the target
            if not creds.may(os.stat(root + str(parent)), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                return None
        fd = os.open(root + filename, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES
                or not creds.may(st, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)):
            return None
        return fh.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace").splitlines()


__all__ = ["MAX_SOURCE_BYTES", "Credentials", "read_source"]

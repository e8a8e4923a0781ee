"""Values parsed from a bundle's files while its capture was still running (diagnose/capture/ahead.py),
handed to the analysis at the end so that it does not parse those files again.

A ``Parsed`` is one ``Bundle.derived`` value (a py-spy window's stacks, a torch trace's outcome)
computed from one member of the bundle, with that member's ``Stamp`` (device, inode, size, mtime
and ctime) taken before and after it was read. ``Ahead`` holds them for one bundle path; a Bundle
given one asks it for a key it has not computed yet, and it answers only when the member, opened
now below the bundle (``Bundle.open_member``: no symlink followed, regular files only), still has
that stamp: the file is then the one parsed, and the value the one the analysis would compute from
it (a rewrite changes the ctime, which no one can set), so the findings of the live capture equal
those of ``diagnose analyze`` on its bundle. Standard library only.
"""
from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnose.bundle.reader import Bundle


@dataclass(frozen=True)
class Stamp:
    """What identifies one version of a file: st_dev, st_ino, st_size (bytes), st_mtime_ns, st_ctime_ns."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, fd: int) -> Stamp:
        st = os.fstat(fd)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def member_stamp(bundle: Bundle, name: str) -> Stamp | None:
    """The stamp of regular file ``name`` inside ``bundle`` now, or None (absent or refused:
    ``bundle.unreadable`` says why, as when the analysis opens it)."""
    fd = bundle.open_member(name)
    if fd is None:
        return None
    try:
        return Stamp.of(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Parsed:
    """``value`` of ``Bundle.derived(key, ...)``, computed from member ``member`` as ``stamp`` says it was."""

    key: Hashable
    member: str
    stamp: Stamp
    value: Any


@dataclass
class Ahead:
    """The values parsed ahead for the bundle at ``path`` (the same path the analysis opens).
    ``taken``: the keys handed to the analysis; ``stale``: how many were refused (their file changed)."""

    path: Path
    parsed: dict[Hashable, Parsed] = field(default_factory=dict)
    taken: list[Hashable] = field(default_factory=list)
    stale: int = 0

    @property
    def used(self) -> int:
        return len(self.taken)

    def add(self, p: Parsed) -> None:
        self.parsed[p.key] = p

    def take(self, bundle: Bundle, key: Hashable) -> tuple[bool, Any]:
        """(True, value) when ``key`` was parsed ahead from a member ``bundle`` still holds unchanged,
        else (False, None); a value is handed out once."""
        p = self.parsed.pop(key, None)
        if p is None or Path(bundle.path) != Path(self.path):
            return False, None
        if member_stamp(bundle, p.member) != p.stamp:
            self.stale += 1
            return False, None
        self.taken.append(key)
        return True, p.value


__all__ = ["Ahead", "Parsed", "Stamp", "member_stamp"]

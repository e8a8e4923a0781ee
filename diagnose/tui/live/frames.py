"""The top frames of the newest py-spy samples, from two consecutive analyses. Pure.

Each analysis lists its top stacks with their sampled thread-seconds since the capture started
(``StackShare.seconds``) and their share of all active thread-seconds (``share_pct``), so the active
total is ``seconds * 100 / share_pct``. Between two analyses a stack's new seconds over the new
active total is its share of the samples taken in between (the newest py-spy window or windows).
A stack outside the earlier analysis's top list counts from zero, which can only overstate it.
"""
from __future__ import annotations

from dataclasses import dataclass

from diagnose.model import StackShare

MIN_PCT = 0.5  # rows under this share of the samples are left out (they would read "0%")


@dataclass(frozen=True)
class FrameShare:
    """A stack's leaf frame, its category and ``pct`` of the active thread-seconds sampled."""

    frame: str
    category: str
    pct: float


@dataclass(frozen=True)
class FrameWindow:
    """``rows`` largest first; ``newest``: over the samples since the previous analysis (else
    over the whole capture so far); ``active_s``: the thread-seconds they cover."""

    rows: tuple[FrameShare, ...]
    newest: bool
    active_s: float


def active_s(stacks: tuple[StackShare, ...]) -> float:
    """All active thread-seconds sampled, from any stack's seconds and share (0 when none)."""
    return next((s.seconds * 100.0 / s.share_pct for s in stacks if s.share_pct > 0), 0.0)


def _key(s: StackShare) -> tuple[str, tuple[str, ...], str]:
    return s.thread, s.frames, s.category


def _rows(pairs: list[tuple[StackShare, float]], total_s: float) -> tuple[FrameShare, ...]:
    """Stacks with the same leaf frame and category merged, largest first."""
    merged: dict[tuple[str, str], float] = {}
    for s, secs in pairs:
        if secs > 0 and s.frames:
            key = (s.frames[-1], s.category)
            merged[key] = merged.get(key, 0.0) + secs
    rows = [FrameShare(frame, cat, 100.0 * secs / total_s) for (frame, cat), secs in merged.items()
            if 100.0 * secs / total_s >= MIN_PCT]
    return tuple(sorted(rows, key=lambda r: (-r.pct, r.frame)))


def window_frames(prev: tuple[StackShare, ...], cur: tuple[StackShare, ...]) -> FrameWindow | None:
    """The newest samples' top frames (``prev`` empty: the whole capture so far); None when no
    sample arrived in between."""
    total = active_s(cur)
    if not prev:
        return FrameWindow(_rows([(s, s.seconds) for s in cur], total), False, total) if total > 0 else None
    new_s = total - active_s(prev)
    if new_s <= 1e-9:
        return None
    before = {_key(s): s.seconds for s in prev}
    return FrameWindow(_rows([(s, s.seconds - before.get(_key(s), 0.0)) for s in cur], new_s), True, new_s)

"""CPU stacks from py-spy: rebuild timed stacks from its Chrome trace and classify them.

py-spy's chrometrace merges consecutive identical samples of a thread into B/E pairs per frame, so
a stack holds from the event that opened it until the next event of that thread. Time spent under
a stack therefore equals its sample count divided by the sampling rate; shares below are shares of
sampled thread-time. Pure functions: input is parsed JSON, output is dataclasses.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from diagnose.catalogs.frames import (
    CALL_PATHS,
    CONTEXT_CATEGORY,
    FRAME_CATALOG,
    PARKED,
    CallPath,
    Category,
    FramePattern,
)

_THREAD = re.compile(r"^thread \((0x[0-9a-fA-F]{1,16}|\d{1,19})\):?\s*(.*)$")


class Frame(NamedTuple):
    """One Python frame: a tuple (C-level hash and equality: stacks of frames key the profile's
    tables, hashed and compared millions of times)."""

    function: str
    file: str
    line: int

    def label(self) -> str:
        short = "/".join(self.file.rsplit("/", 2)[-2:]) if self.file else "?"
        return f"{self.function} ({short}:{self.line})"


@dataclass(frozen=True)
class Segment:
    """A stack (root first) held by one thread from ``start_us`` to ``end_us`` (window clock).
    ``tid`` is the OS thread id py-spy's thread frame names (distinct across processes), else the
    event's pthread id."""

    tid: int
    thread: str
    start_us: float
    end_us: float
    frames: tuple[Frame, ...]
    pid: int | None = None  # the process py-spy sampled it in (None: the event carried no pid)


def segments_from_chrometrace(events: Iterable[dict[str, Any]]) -> list[Segment]:
    """Rebuild per-thread stack intervals from py-spy B/E events (``ts`` in us).

    py-spy diffs each sample against the previous sample *of the same tid*, whatever its process:
    with --subprocesses a forked child reuses its parent's pthread id, so one tid's B/E stream
    interleaves the samples of several processes (the events of a sample carry that sample's
    ``pid``). The stream is replayed per tid, as written; the time is attributed per (pid, tid): a
    process's stack holds from its sample until that process's next sample, not until the next
    sample of whichever process shares its tid (which gave the last-sampled process all the time).
    """
    replay = _Replay()
    run: tuple[int, int, float] | None = None  # (tid, pid, ts) of the sample being read
    for ev in sorted(
        (e for e in events if isinstance(e, dict) and e.get("ph") in ("B", "E") and _well_formed(e)),
        key=lambda e: float(e.get("ts", 0)),  # stable: same-µs events keep py-spy's order
    ):
        key = (int(ev.get("tid", 0)), _pid(ev), float(ev.get("ts", 0)))
        if run is not None and key != run:
            replay.sample(*run)
        run = key
        replay.apply(ev)
    if run is not None:
        replay.sample(*run)
    return replay.finish()


@dataclass
class _Held:
    """The stack one (pid, tid) showed in its last sample, and who sampled on its tid since."""

    start: float
    stack: tuple[dict[str, Any], ...]
    period: float | None  # the time between its last two samples (us)
    first_other: float | None = None  # when another process on the tid was first sampled after it
    others: set[int] = field(default_factory=set)

    def gone_at(self) -> float:
        """Where a process that was not sampled again ends: one of its own periods after its
        last sample (else at the next sample of another process on its tid)."""
        if self.period is not None:
            return self.start + self.period
        return self.first_other if self.first_other is not None else self.start


class _Replay:
    """py-spy's diff state per tid, and the stack each (pid, tid) holds."""

    def __init__(self) -> None:
        self.open: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.held: dict[int, dict[int, _Held]] = defaultdict(dict)
        self.last_pid: dict[int, int] = {}
        self.last_ts = 0.0
        self.out: list[Segment] = []
        # A stack held over many samples is the same B events each time: its frames are built once
        # (keyed by the events' ids: they stay alive for the whole replay), and equal stacks and
        # frames are one object (smaller to keep, to pickle from a capture's parsing child, to hash).
        self._built: dict[tuple[int, ...], tuple[int, str, tuple[Frame, ...]] | None] = {}
        self._interned: dict[Any, Any] = {}

    def apply(self, ev: dict[str, Any]) -> None:
        stack = self.open[int(ev.get("tid", 0))]
        if ev["ph"] == "B":
            stack.append(ev)
        elif stack:
            stack.pop()

    def sample(self, tid: int, pid: int, ts: float) -> None:
        """The events of one sample of (pid, tid) at ``ts`` were applied."""
        self.last_ts = max(self.last_ts, ts)
        held = self.held[tid]
        for other, h in list(held.items()):
            if other == pid:
                continue
            if pid in h.others:  # a whole round without ``other``: it was not sampled again
                self._close(tid, other, min(h.gone_at(), ts))
            else:
                h.others.add(pid)
                h.first_other = ts if h.first_other is None else h.first_other
        prev = held.pop(pid, None)
        period = prev.period if prev is not None else None
        if prev is not None:
            self._emit(tid, pid, prev, ts)
            period = ts - prev.start
        self.last_pid[tid] = pid
        stack = self.open[tid]
        if stack:  # py-spy's closing events empty it: the recording ended
            held[pid] = _Held(ts, tuple(stack), period)

    def _close(self, tid: int, pid: int, end: float) -> None:
        h = self.held[tid].pop(pid)
        self._emit(tid, pid, h, end)

    def _emit(self, tid: int, pid: int, h: _Held, end: float) -> None:
        if end > h.start:
            key = (tid, *map(id, h.stack))
            if key in self._built:
                built = self._built[key]
            else:
                built = self._built[key] = _stack(tid, h.stack, self._interned)
            if built is not None:
                self.out.append(Segment(built[0], built[1], h.start, end, built[2], pid or None))

    def finish(self) -> list[Segment]:
        """Close the stacks of processes not sampled after the last sample of their tid; the
        tid's last-sampled stack stays open only in a torn file (py-spy closes it) and is left out."""
        for tid, held in self.held.items():
            for pid in [p for p in held if p != self.last_pid.get(tid)]:
                self._close(tid, pid, min(held[pid].gone_at(), self.last_ts))
        self.out.sort(key=lambda s: s.end_us)  # the order they ended in, as one tid's stream emits them
        return self.out


def _pid(ev: dict[str, Any]) -> int:
    pid = ev.get("pid", 0)
    return pid if type(pid) is int else 0


def _well_formed(ev: dict[str, Any]) -> bool:
    """One event's tid and ts are numbers: a malformed event costs itself, not its window."""
    tid, ts = ev.get("tid", 0), ev.get("ts", 0)
    return (type(tid) is int and abs(tid) < 2**63 and isinstance(ts, (int, float)) and not isinstance(ts, bool)
            and math.isfinite(ts))


def _stack(key: int, stack: tuple[dict[str, Any], ...], interned: dict[Any, Any]
           ) -> tuple[int, str, tuple[Frame, ...]] | None:
    """(tid, thread name, frames) of a held stack of B events, None without a Python frame; frames
    and the frames tuple are taken from ``interned`` when an equal one was built before."""
    tid, thread, process = key, "?", ""
    frames = []
    for ev in stack:
        args = ev.get("args") or {}
        name = str(ev.get("name", "?"))
        m = _THREAD.match(name) if not args.get("filename") else None
        if m:
            raw = m.group(1)
            tid = int(raw, 16) if raw.startswith("0x") else int(raw)
            thread = m.group(2) or thread
            continue
        if not args.get("filename") and name.startswith("process "):
            process = name.split(":", 1)[0]  # "process 1234:\"cmdline\"" with --subprocesses
            continue
        frame = Frame(name, str(args.get("filename") or ""), int(args.get("line") or 0))
        frames.append(interned.setdefault(frame, frame))
    if not frames:
        return None
    whole = tuple(frames)
    return tid, f"{thread} [{process}]" if process else thread, interned.setdefault(whole, whole)


@cache
def _compiled(pattern: FramePattern) -> tuple[re.Pattern[str] | None, ...]:
    return tuple(re.compile(p) if p else None
                 for p in (pattern.function, pattern.file, pattern.source, pattern.parent))


def _matches(p: FramePattern, frame: Frame, source: str | None, caller: Frame | None, leaf: bool) -> bool:
    if (p.leaf_only or p.source or p.parent) and not leaf:
        return False
    fn_re, file_re, src_re, parent_re = _compiled(p)
    if parent_re and (caller is None or not parent_re.search(caller.function)):
        return False
    if fn_re and not fn_re.search(frame.function):
        return False
    if file_re and not file_re.search(frame.file):
        return False
    if src_re and (source is None or not src_re.search(source)):
        return False
    return True


def classify(frames: tuple[Frame, ...], sources: dict[tuple[str, int], str]) -> str:
    """Category of a stack (root first): first catalog match walking from the innermost frame."""
    for depth, frame in enumerate(reversed(frames)):
        src = sources.get((frame.file, frame.line))
        caller = frames[-depth - 2] if depth + 1 < len(frames) else None
        for pattern in FRAME_CATALOG:
            if _matches(pattern, frame, src, caller, leaf=depth == 0):
                return pattern.category
    return Category.PYTHON


def _rx(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


_CALL_PATHS = tuple((p, _rx(p.function), _rx(p.file), _rx(p.leaf_exempt)) for p in CALL_PATHS)


def _path(frames: tuple[Frame, ...]) -> tuple[CallPath, re.Pattern[str] | None] | None:
    for frame in frames:
        for path, function, file, exempt in _CALL_PATHS:
            if (function is None or function.search(frame.function)) and (file is None or file.search(frame.file)):
                return path, exempt
    return None


def call_path(frames: tuple[Frame, ...]) -> str | None:
    """The context of a stack (root first): the outermost frame matching a CALL_PATHS pattern
    decides (a DataLoader fetch that calls a model is still the input pipeline)."""
    found = _path(frames)
    return found[0].context if found else None


def categorize(frames: tuple[Frame, ...], sources: dict[tuple[str, int], str]) -> str:
    """The category of a stack: its leaf's (``classify``) as its call path reads it
    (catalogs/frames.py CONTEXT_CATEGORY: Pillow under a DataLoader fetch is the input pipeline),
    unless the leaf lies in the path's exempt files (asyncio's own non-blocking socket calls)."""
    cat = classify(frames, sources)
    found = _path(frames)
    if found is None or (found[1] is not None and frames and found[1].search(frames[-1].file)):
        return cat
    return CONTEXT_CATEGORY.get(found[0].context, {}).get(cat, cat)


@dataclass
class StackProfile:
    """Sampled thread-time aggregated by (stack, category), category, thread and function (seconds)."""

    by_stack: dict[tuple[tuple[Frame, ...], str], float] = field(default_factory=lambda: defaultdict(float))
    stack_threads: dict[tuple[tuple[Frame, ...], str], set[str]] = field(default_factory=lambda: defaultdict(set))
    by_category: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_thread: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    thread_category: dict[int, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    thread_names: dict[int, str] = field(default_factory=dict)
    self_s: dict[Frame, float] = field(default_factory=lambda: defaultdict(float))
    total_s: dict[Frame, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def sampled_s(self) -> float:
        return sum(self.by_category.values())

    @property
    def active_s(self) -> float:
        """Thread-time not parked waiting for work."""
        return sum(v for c, v in self.by_category.items() if c not in PARKED)

    def add(self, seg: Segment, cat: str) -> None:
        dur_s = (seg.end_us - seg.start_us) / 1e6
        self.by_stack[(seg.frames, cat)] += dur_s
        self.stack_threads[(seg.frames, cat)].add(seg.thread)
        self.by_category[cat] += dur_s
        self.by_thread[seg.tid] += dur_s
        self.thread_category[seg.tid][cat] += dur_s
        self.thread_names[seg.tid] = seg.thread
        if cat not in PARKED:
            self.self_s[seg.frames[-1]] += dur_s
            for fr in dict.fromkeys(seg.frames):  # each frame once, in a stable order
                self.total_s[fr] += dur_s

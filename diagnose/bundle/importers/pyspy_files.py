"""Import py-spy output: ``--format raw`` (collapsed stacks), ``speedscope`` or ``chrometrace``.

Each file becomes one window of the pyspy streams (a ``PYSPY_WINDOWS`` file in py-spy's
chrometrace shape, indexed in ``PYSPY``), so the CPU analysis reads it like a live capture.
raw and speedscope files carry no wall-clock time: the window has no ``origin_ns`` and cannot be
aligned with other streams. raw files carry sample counts only; their rate is assumed to be py-spy's
default, ASSUMED_RATE_HZ, and recorded as assumed.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec

from diagnose.bundle import write_private_text
from diagnose.bundle.importers.base import Artifact, ImportContext, ImportFailed
from diagnose.bundle.streams import PYSPY, PYSPY_WINDOWS

ASSUMED_RATE_HZ = 100
SPEEDSCOPE_SCHEMA = "speedscope.app/file-format-schema"
_RAW_LINE = re.compile(r"^(.+) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")
_RAW_THREAD = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)")
_SS_THREAD = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+)(?: "(.*)")?')
_UNIT_US = {"seconds": 1e6, "milliseconds": 1e3, "microseconds": 1.0, "nanoseconds": 1e-3}

Stack = tuple[tuple[str, str, int], ...]  # (function, file, line), root first


def chrometrace_events(tid: int, thread: str, samples: Iterable[tuple[Stack, float]]) -> list[dict[str, Any]]:
    """B/E events of one thread from (stack, duration us) samples laid end to end from ts 0."""
    out: list[dict[str, Any]] = []
    t = 0.0
    head = {"name": f"thread ({tid}): {thread}", "args": {"filename": "", "line": 0}}
    for stack, dur_us in samples:
        frames = [head] + [{"name": fn, "args": {"filename": f, "line": ln}} for fn, f, ln in stack]
        out += [{**fr, "cat": "py-spy", "ph": "B", "pid": 0, "tid": tid, "ts": t} for fr in frames]
        out += [{**fr, "cat": "py-spy", "ph": "E", "pid": 0, "tid": tid, "ts": t + dur_us}
                for fr in reversed(frames)]
        t += dur_us
    return out


def _merge_runs(samples: Iterable[tuple[Stack, float]]) -> list[tuple[Stack, float]]:
    out: list[tuple[Stack, float]] = []
    for stack, dur in samples:
        if out and out[-1][0] == stack:
            out[-1] = (stack, out[-1][1] + dur)
        else:
            out.append((stack, dur))
    return out


def parse_frame(text: str) -> tuple[str, str, int]:
    m = _FRAME.match(text)
    return (m.group(1), m.group(2), int(m.group(3))) if m else (text, "", 0)


def raw_threads(text: str) -> dict[tuple[int, str], list[tuple[Stack, float]]]:
    """py-spy raw lines 'frame;frame;... COUNT' -> samples per (tid, thread name)."""
    threads: dict[tuple[int, str], list[tuple[Stack, float]]] = defaultdict(list)
    dur_per_sample = 1e6 / ASSUMED_RATE_HZ
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        m = _RAW_LINE.match(line)
        if not m:
            raise ValueError(f"line {n} is not 'frame;frame;... COUNT'")
        parts = [p for p in m.group(1).split(";") if not p.startswith("process ")]
        key = (0, "MainThread")
        t = _RAW_THREAD.match(parts[0]) if parts else None
        if t:
            raw_tid = t.group(1)
            key = (int(raw_tid, 16) if raw_tid.startswith("0x") else int(raw_tid),
                   parts[0].split(":", 1)[1].strip() if ":" in parts[0] else raw_tid)
            parts = parts[1:]
        threads[key].append((tuple(parse_frame(p) for p in parts), int(m.group(2)) * dur_per_sample))
    return threads


class _Frame(msgspec.Struct, frozen=True):
    name: str = "?"
    file: str | None = None
    line: int | None = None


class _Shared(msgspec.Struct, frozen=True):
    frames: tuple[_Frame, ...] = ()


class _Profile(msgspec.Struct, frozen=True):
    type: str | None = None
    unit: str | None = None
    name: str | None = None
    samples: tuple[tuple[int, ...], ...] = ()
    weights: tuple[float, ...] = ()


class _Speedscope(msgspec.Struct, frozen=True):
    """What is read of a speedscope file (its published file-format schema; unknown fields ignored)."""

    shared: _Shared = _Shared()
    profiles: tuple[_Profile, ...] = ()


def speedscope_threads(doc: dict[str, Any]) -> dict[tuple[int, str], list[tuple[Stack, float]]]:
    """Samples per (tid, thread name) of a speedscope document; raises ValueError when it does not
    have the schema's shape (a frame name that is not a string, a sample that is not frame indices)."""
    try:
        ss = msgspec.convert(doc, _Speedscope)
    except msgspec.ValidationError as exc:
        raise ValueError(f"speedscope document: {exc}") from None
    frames = [(f.name, f.file or "", f.line or 0) for f in ss.shared.frames]
    threads: dict[tuple[int, str], list[tuple[Stack, float]]] = {}
    for i, prof in enumerate(ss.profiles):
        if prof.type != "sampled":
            raise ValueError(f"profile {i} is {prof.type!r}; only sampled profiles (py-spy) are read")
        scale = _UNIT_US.get(prof.unit or "", 1e6 / ASSUMED_RATE_HZ)
        m = _SS_THREAD.match(prof.name or "")
        tid = (int(m.group(1), 16) if m.group(1).startswith("0x") else int(m.group(1))) if m else i
        name = (m.group(2) or m.group(1)) if m else (f"profile {i}" if prof.name is None else prof.name)
        weights = prof.weights or (1.0,) * len(prof.samples)
        threads[(tid, name)] = [(tuple(frames[j] for j in stack), w * scale)
                                for stack, w in zip(prof.samples, weights)]
    return threads


def is_pyspy_chrometrace(doc: Any) -> bool:
    return (isinstance(doc, list) and bool(doc) and isinstance(doc[0], dict)
            and doc[0].get("cat") == "py-spy" and "ph" in doc[0])


def is_speedscope(doc: Any) -> bool:
    return isinstance(doc, dict) and SPEEDSCOPE_SCHEMA in str(doc.get("$schema", ""))


def is_raw(artifact: Artifact) -> bool:
    """Collapsed stacks: the first line is 'frame;frame;... COUNT' with py-spy's 'fn (file:line)' frames."""
    if artifact.doc is not None:
        return False
    first = artifact.head.lstrip()[:4096].split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    m = _RAW_LINE.match(first)
    return m is not None and any(_FRAME.match(p) or _RAW_THREAD.match(p) for p in m.group(1).split(";"))


class PySpyImporter:
    kind = "py-spy output"
    collector = "pyspy"

    def sniff(self, artifact: Artifact) -> bool:
        doc = artifact.doc
        return is_pyspy_chrometrace(doc) or is_speedscope(doc) or is_raw(artifact)

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        doc = artifact.doc
        try:
            if is_pyspy_chrometrace(doc):
                events, fmt, rate = doc, "chrometrace", None
                samples = None
            else:
                threads = speedscope_threads(doc) if is_speedscope(doc) else raw_threads(artifact.text())
                fmt = "speedscope" if is_speedscope(doc) else "raw"
                rate = ASSUMED_RATE_HZ if fmt == "raw" else None
                events = [ev for (tid, name), s in threads.items()
                          for ev in chrometrace_events(tid, name, _merge_runs(s))]
                samples = round(sum(d for s in threads.values() for _, d in s) * ASSUMED_RATE_HZ / 1e6)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ImportFailed(f"{artifact.path}: unreadable py-spy {exc}; pass py-spy's raw, speedscope "
                               "or chrometrace output") from None
        self._write(artifact, ctx, events, fmt, rate, samples)

    @staticmethod
    def _write(artifact: Artifact, ctx: ImportContext, events: list[Any], fmt: str,
               rate: int | None, samples: int | None) -> None:
        n = ctx.next_index("pyspy")
        rel = PYSPY_WINDOWS.file(n)
        ctx.writer.file_path(PYSPY_WINDOWS.directory).mkdir(mode=0o700, exist_ok=True)
        write_private_text(ctx.writer.file_path(rel), json.dumps(events, separators=(",", ":")))
        last = max((float(e.get("ts", 0)) for e in events if isinstance(e, dict)), default=0.0)
        record: dict[str, Any] = {"window": n, "file": rel, "last_ts_us": last, "errors": 0,
                                  "format": fmt, "imported_from": str(artifact.path)}
        if samples is not None:
            record["samples"] = samples
        if rate is not None:
            record.update(rate_hz=rate, rate_assumed=True)
        ctx.writer.stream(PYSPY.name).write(record)
        ctx.produced("pyspy", artifact.path, windows=1, samples=samples or 0)
        if rate is not None:
            ctx.note("pyspy", f"{artifact.path.name}: raw output has no rate; {rate} Hz assumed")

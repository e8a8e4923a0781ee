"""CPU signal source: py-spy stacks + process collector -> signals, thread table, top stacks."""
from __future__ import annotations

import json
from typing import Any

from diagnose.bundle import Bundle
from diagnose.model import Signal, StackShare, ThreadSummary, missing
from diagnose.rules.frame_catalog import ALL_CATEGORIES, PARKED, Category
from diagnose.signals.base import SourceResult, collector_reason
from diagnose.signals.process import (KernelTimeline, ProcessSummary, dominant_wait, process_signals,
                                      summarize)
from diagnose.signals.stacks import Frame, Segment, StackProfile, classify, segments_from_chrometrace

PYSPY_SRC = "py-spy (chrometrace, sampled thread-time)"


KERNEL_TOLERANCE_NS = 60_000_000  # a reading within 60 ms of a segment speaks for it (10 Hz readings)


def load_profile(bundle: Bundle, kernel: KernelTimeline | None = None
                 ) -> tuple[StackProfile, list[dict[str, Any]], int]:
    """Read every py-spy window of the bundle. Returns (profile, window records, unreadable windows)."""
    sources = {(r["file"], int(r["line"])): r["text"] for r in bundle.records("pyspy-sources.jsonl")}
    profile = StackProfile()
    windows = sorted(bundle.records("pyspy.jsonl"), key=lambda w: w.get("window", 0))
    categories: dict[tuple[Frame, ...], str] = {}
    bad = 0
    for w in windows:
        try:
            events = json.loads((bundle.path / w["file"]).read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError, KeyError):
            bad += 1
            continue
        for seg in segments_from_chrometrace(events if isinstance(events, list) else []):
            cat = categories.get(seg.frames)
            if cat is None:
                cat = categories[seg.frames] = classify(seg.frames, sources)
            profile.add(seg, _kernel_checked(cat, seg, w.get("origin_ns"), kernel))
    return profile, windows, bad


def _kernel_checked(cat: str, seg: Segment, origin_ns: int | None, kernel: KernelTimeline | None) -> str:
    """py-spy shows where a thread is, not what it waits on. A Python frame in socket/file code is
    a wait only if the kernel agrees: in a futex it waits for the GIL (or a lock) after its IO
    returned; running, it is copying data through the kernel (payload size is the cost)."""
    if cat != Category.IO_WAIT or kernel is None or origin_ns is None:
        return cat
    mid_ns = int(origin_ns + (seg.start_us + seg.end_us) * 500)
    state = kernel.state_at(seg.tid, mid_ns, KERNEL_TOLERANCE_NS)
    return {"lock_wait": Category.LOCK_WAIT, "running": Category.IO_CPU}.get(state or "", cat)


def stack_signals(profile: StackProfile, reason: str) -> dict[str, Signal]:
    out: dict[str, Signal] = {}
    active = profile.active_s
    for cat in ALL_CATEGORIES:
        if cat in PARKED:
            continue
        name = f"cpu.category_share_pct[{cat}]"
        if profile.sampled_s <= 0:
            out[name] = missing(name, "%", PYSPY_SRC, reason)
        elif active <= 0:
            out[name] = missing(name, "%", PYSPY_SRC, "every sampled thread was idle (no load during the capture?)")
        else:
            out[name] = Signal(name, 100.0 * profile.by_category.get(cat, 0.0) / active, "%",
                               PYSPY_SRC + ", share of non-idle thread-time")
    name = "cpu.idle_share_pct"
    out[name] = (Signal(name, 100.0 * (profile.sampled_s - active) / profile.sampled_s, "%", PYSPY_SRC)
                 if profile.sampled_s > 0 else missing(name, "%", PYSPY_SRC, reason))
    out["stacks.sampled_s"] = Signal("stacks.sampled_s", profile.sampled_s, "s", PYSPY_SRC)
    return out


def pyspy_quality(windows: list[dict[str, Any]], bad: int) -> dict[str, Any]:
    samples = sum(int(w.get("samples", 0)) for w in windows)
    errors = sum(int(w.get("errors", 0)) for w in windows)
    gaps_ms = [
        (b["origin_ns"] - (a["origin_ns"] + a.get("last_ts_us", 0) * 1000)) / 1e6
        for a, b in zip(windows, windows[1:])
        if "origin_ns" in a and "origin_ns" in b
    ]
    return {
        "pyspy_windows": len(windows),
        "pyspy_unreadable_windows": bad,
        "pyspy_samples": samples,
        "pyspy_errors": errors,
        "pyspy_error_ratio": round(errors / (samples + errors), 4) if samples + errors else None,
        "pyspy_gap_between_windows_ms_max": round(max(gaps_ms), 1) if gaps_ms else None,
        "pyspy_gap_between_windows_ms_mean": round(sum(gaps_ms) / len(gaps_ms), 1) if gaps_ms else None,
        "pyspy_clock_alignment_error_ms_max": round(
            max((w.get("origin_err_ns", 0) for w in windows), default=0) / 1e6, 1) if windows else None,
    }


def top_stacks(profile: StackProfile, n: int = 10) -> tuple[StackShare, ...]:
    active = profile.active_s
    if active <= 0:
        return ()
    rows = sorted(((secs, key) for key, secs in profile.by_stack.items() if key[1] not in PARKED),
                  key=lambda r: r[0], reverse=True)
    return tuple(
        StackShare(_threads_label(profile.stack_threads[key]), tuple(f.label() for f in key[0]),
                   key[1], 100.0 * secs / active, secs)
        for secs, key in rows[:n]
    )


def _threads_label(names: set[str]) -> str:
    first = sorted(names)[0]
    return first if len(names) == 1 else f"{len(names)} threads, e.g. {first}"



def top_functions(profile: StackProfile, n: int = 10) -> list[dict[str, Any]]:
    active = profile.active_s
    if active <= 0:
        return []
    ranked = sorted(profile.total_s.items(), key=lambda kv: (profile.self_s.get(kv[0], 0), kv[1]), reverse=True)
    return [
        {"function": fr.label(), "self_pct": round(100.0 * profile.self_s.get(fr, 0) / active, 2),
         "total_pct": round(100.0 * tot / active, 2)}
        for fr, tot in ranked[:n]
    ]


def thread_table(profile: StackProfile, proc: ProcessSummary | None) -> tuple[ThreadSummary, ...]:
    tids = set(profile.by_thread) | (set(proc.threads) if proc else set())
    rows = []
    for tid in tids:
        cats = profile.thread_category.get(tid)
        usage = proc.threads.get(tid) if proc else None
        cpu = 100.0 * usage.cpu_s / proc.elapsed_s if usage and proc and proc.elapsed_s > 0 else None
        name = profile.thread_names.get(tid) or (proc.comm.get(tid) if proc else None) or "?"
        rows.append(ThreadSummary(
            tid, name if tid in profile.by_thread else f"[native] {name}", cpu,
            max(cats, key=cats.get) if cats else None, profile.by_thread.get(tid, 0.0),
            dominant_wait(usage) if usage else None,
        ))
    rows.sort(key=lambda t: (t.cpu_pct or 0.0, t.sampled_s), reverse=True)
    return tuple(rows)


def cpu_signals(bundle: Bundle) -> SourceResult:
    proc_records = sorted(bundle.records("process.jsonl"), key=lambda r: r.get("t_ns", 0))
    profile, windows, bad = load_profile(bundle, KernelTimeline(proc_records))
    pyspy_reason = collector_reason(bundle, "pyspy")
    proc = summarize(proc_records, list(bundle.records("threads.jsonl")))
    signals = stack_signals(profile, pyspy_reason)
    python_tids = set(profile.by_thread) if profile.sampled_s > 0 else None
    parked = frozenset(tid for tid, cats in profile.thread_category.items()
                       if max(cats, key=cats.get) in PARKED)
    signals.update(process_signals(proc, collector_reason(bundle, "process"), python_tids, parked))
    quality = pyspy_quality(windows, bad)
    quality["process_records"] = len(proc_records)
    return SourceResult(signals, quality, threads=thread_table(profile, proc),
                        top_stacks=top_stacks(profile),
                        details={"top_functions": top_functions(profile)})

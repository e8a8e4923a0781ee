"""speedscope: the py-spy CPU stacks of every thread, in speedscope's file format
(https://www.speedscope.app, format documented by the schema its npm package ships as
``dist/release/file-format-schema.json``).

One "sampled" profile per thread, in seconds: each sample is a stack (frame indices, root first)
weighted by how long py-spy saw the thread in it; windows follow each other in capture order (the
sampling gaps between windows are not time the thread spent anywhere, so they are left out).
Frames are shared across threads. Pure: it reads only the Report's bundle.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from diagnose import __version__
from diagnose.bundle.streams import THREADS
from diagnose.model import Report
from diagnose.render.base import Renderer
from diagnose.render.units import pid_text

if TYPE_CHECKING:
    from diagnose.signals.stacks import Frame

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


class SpeedscopeRenderer(Renderer):
    format = "speedscope"
    extension = ".speedscope.json"
    title = "speedscope"
    description = "py-spy stacks per thread for speedscope (open the file at www.speedscope.app)"
    tui_key = "s"

    def render(self, report: Report) -> str:
        # lazily: the registry is imported by `diagnose --help`, the signals package pulls numpy
        from diagnose.signals.cpu import pyspy_windows
        from diagnose.signals.timeline import AGENT_THREAD_PREFIX

        frames: dict[Frame, int] = {}
        threads: dict[int, dict[str, Any]] = {}
        names = _thread_names(report)
        for window in pyspy_windows(report.bundle):
            for seg in window.segments or ():
                dur_s = (seg.end_us - seg.start_us) / 1e6
                if dur_s <= 0 or not seg.frames:
                    continue
                name = seg.thread if seg.thread != "?" else names.get(seg.tid, "thread")
                t = threads.setdefault(seg.tid, {"name": name, "samples": [], "weights": []})
                t["samples"].append([frames.setdefault(f, len(frames)) for f in seg.frames])
                t["weights"].append(dur_s)
        # every thread is sampled for the whole window: open on the one that used the most CPU (/proc
        # readings), diagnose's own agent threads last
        cpu = _thread_cpu_s(report)
        order = sorted(threads.items(), key=lambda kv: (kv[1]["name"].startswith(AGENT_THREAD_PREFIX),
                                                         -cpu.get(kv[0], 0.0), kv[0]))
        profiles = [_profile(tid, t) for tid, t in order]
        target = report.bundle.info.target
        doc = {
            "$schema": SCHEMA,
            "name": f"diagnose: pid {pid_text(target)} ({'?' if target.name is None else target.name})",
            "exporter": f"diagnose {__version__}",
            "activeProfileIndex": 0,
            "shared": {"frames": [_frame(f) for f in frames]},
            "profiles": profiles,
        }
        return json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"


def _thread_cpu_s(report: Report) -> dict[int, float]:
    """CPU seconds per thread over the capture (process collector: utime + stime deltas)."""
    from diagnose.signals.threads import bundle_thread_usage

    usage = bundle_thread_usage(report.bundle)
    return {tid: tu.cpu_s for tid, tu in usage.items()}


def _thread_names(report: Report) -> dict[int, str]:
    """OS thread names from the process collector (py-spy names only the main thread)."""
    out: dict[int, str] = {}
    for rec in report.bundle.typed(THREADS):
        if rec.comm is not None:
            out[rec.tid] = rec.comm
    return out


def _profile(tid: int, t: dict[str, Any]) -> dict[str, Any]:
    return {"type": "sampled", "name": f"{t['name'] or 'thread'} ({tid})", "unit": "seconds",
            "startValue": 0.0, "endValue": sum(t["weights"]), "samples": t["samples"], "weights": t["weights"]}


def _frame(f: Frame) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f.function or "?"}
    if f.file:
        out["file"] = f.file
    if f.line > 0:
        out["line"] = f.line
    return out

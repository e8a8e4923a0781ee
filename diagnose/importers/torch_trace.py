"""Import a torch profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``.

The trace is stored gzipped as ``torch/trace-NNNN.json.gz`` exactly as it was (re-compressed only
when it came uncompressed) and indexed in ``torch.jsonl``. Its place on the Unix clock comes from
Kineto's ``baseTimeNanoseconds`` (event ``ts`` are us from it); traces without it (older torch)
get ``start_ns``/``end_ns`` None: they can be analysed alone but not aligned with other streams.
"""
from __future__ import annotations

import gzip
import os
from typing import Any

from diagnose.importers.base import Artifact, ImportContext, ImportFailed

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation"}


def is_torch_trace(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)


def span_us(events: list[Any]) -> tuple[float, float] | None:
    """(first ts, last ts + dur) in the trace's us over timed events, or None if there are none."""
    lo, hi = float("inf"), float("-inf")
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") == "M":
            continue
        ts = ev.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        dur = ev.get("dur")
        lo = min(lo, ts)
        hi = max(hi, ts + (dur if isinstance(dur, (int, float)) else 0))
    return (lo, hi) if lo <= hi else None


def activities(events: list[Any]) -> list[str]:
    gpu = any(isinstance(e, dict) and e.get("cat") in GPU_CATEGORIES for e in events)
    return ["cpu", "cuda"] if gpu else ["cpu"]


class TorchTraceImporter:
    kind = "torch trace"
    collector = "agent"

    def sniff(self, artifact: Artifact) -> bool:
        return is_torch_trace(artifact.doc)

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        doc = artifact.doc
        events = doc["traceEvents"]
        base = doc.get("baseTimeNanoseconds")
        base = int(base) if isinstance(base, (int, float)) and base > 0 else None
        bounds = span_us(events)
        start_ns = end_ns = None
        if base is not None and bounds is not None:
            start_ns, end_ns = base + int(bounds[0] * 1000), base + int(bounds[1] * 1000)
        n = ctx.next_index("torch")
        rel = f"torch/trace-{n:04d}.json.gz"
        self._store(artifact, ctx, rel)
        ctx.writer.stream("torch.jsonl").write({
            "file": rel, "start_ns": start_ns, "end_ns": end_ns, "base_time_ns": base,
            "activities": activities(events), "torch_version": str(doc.get("torch_version") or "unknown"),
            "error": None, "imported_from": str(artifact.path),
        })
        ctx.saw_time(start_ns, end_ns)
        ctx.produced("agent", artifact.path, torch_traces=1, torch_events=len(events))
        if base is None:
            ctx.note("agent", f"{artifact.path.name} has no baseTimeNanoseconds: not placed on the Unix clock")

    @staticmethod
    def _store(artifact: Artifact, ctx: ImportContext, rel: str) -> None:
        dst = ctx.writer.file_path(rel)
        dst.parent.mkdir(mode=0o700, exist_ok=True)
        try:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                if artifact.gzipped:
                    fh.write(artifact.path.read_bytes())
                else:
                    with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=5) as gz:
                        gz.write(artifact.data)
        except OSError as exc:
            raise ImportFailed(f"cannot write {dst}: {exc.strerror or exc}") from None

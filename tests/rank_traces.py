"""Rank traces derived at test time from a real one (never committed): ``world`` copies of a shared
Kineto trace, each with its own ``distributedInfo.rank``, one rank made a straggler."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

HOST_KEEP = ("kernel", "gpu_memcpy", "gpu_memset")  # the GPU timeline, plus ProfilerStep annotations


def _is_collective(e: dict[str, Any]) -> bool:
    return e.get("cat") == "kernel" and ("Collective name" in (e.get("args") or {})
                                          or str(e.get("name", "")).startswith("nccl"))


def _is_step(e: dict[str, Any]) -> bool:
    return str(e.get("name", "")).startswith("ProfilerStep#")


def derive_ranks(doc: dict[str, Any], out: Path, world: int = 8, straggler: int | None = 5,
                 lag_us: float = 20_000.0, seq: bool = False, jitter_us: float = 3.0) -> list[Path]:
    """Write ``world`` gzipped rank traces of ``doc`` (a loaded Kineto trace) under ``out``.

    Rank ``straggler`` arrives ``lag_us`` late: its collective kernels and ProfilerStep starts
    move by +lag_us; every other rank's collective kernels last lag_us longer (they wait for it).
    Rank r also moves its collectives by r x ``jitter_us`` (small realistic skew). ``seq``: each
    collective kernel gets a "Seq" arg (its index in its process group). CPU ops other than
    ProfilerSteps, runtime calls and flow events are dropped to keep the files small (the GPU
    timeline stays)."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("cat") in HOST_KEEP or _is_step(e)]
    paths = []
    for r in range(world):
        evs = []
        n_seq: dict[str, int] = {}
        for e in events:
            e = dict(e)
            if _is_collective(e):
                e["args"] = dict(e.get("args") or {})
                if seq:
                    pg = str(e["args"].get("Process Group Name", "?"))
                    e["args"]["Seq"] = n_seq.get(pg, 0)
                    n_seq[pg] = n_seq.get(pg, 0) + 1
                e["ts"] = e["ts"] + r * jitter_us
                if r == straggler:
                    e["ts"] = e["ts"] + lag_us
                else:
                    e["dur"] = e["dur"] + lag_us
            elif _is_step(e) and r == straggler:
                e["ts"] = e["ts"] + lag_us
            evs.append(e)
        info = {**doc.get("distributedInfo", {}), "rank": r, "world_size": world}
        body = {**{k: v for k, v in doc.items() if k != "traceEvents"}, "distributedInfo": info, "traceEvents": evs}
        p = out / f"rank-{r}.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(body).encode(), 1))
        paths.append(p)
    return paths

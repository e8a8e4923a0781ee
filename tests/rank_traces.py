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
                 lag_us: float = 20_000.0, seq: bool = False, jitter_us: float = 3.0,
                 clock_shift_us: float = 0.0) -> list[Path]:
    """Write ``world`` gzipped rank traces of ``doc`` (a loaded Kineto trace) under ``out``.

    A physical straggler, each rank on its own clock: rank ``straggler`` arrives at every
    collective ``lag_us`` after the others (its collective kernels and ProfilerStep starts move
    by +lag_us); every other rank's matching collective kernel starts on time and lasts until the
    late rank's ends (it waits inside NCCL: stretched by exactly its wait); the data then moves
    for the kernel's original duration. Collective kernels of one stream never overlap: one
    starts no earlier than the previous one ended (the job slows down by the lag at each).
    Rank r also arrives r x ``jitter_us`` late at its collectives (small realistic skew).

    ``clock_shift_us``: instead, a pure clock offset: every timestamp of rank ``straggler`` moves
    by that much and nothing else changes (no rank waits for it).

    ``seq``: each collective kernel gets a "Seq" arg (its index in its process group). CPU ops
    other than ProfilerSteps, runtime calls and flow events are dropped to keep the files small
    (the GPU timeline stays)."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("cat") in HOST_KEEP or _is_step(e)]
    order = sorted((i for i, e in enumerate(events) if _is_collective(e)), key=lambda i: events[i]["ts"])
    late_rank = straggler if straggler is not None else -1

    def offset(r: int) -> float:  # when rank r arrives at a collective, after the on-time ranks
        return r * jitter_us + (lag_us if r == late_rank else 0.0)

    latest = max(offset(r) for r in range(world))
    # per collective: when the on-time ranks arrive, and when every rank's kernel ends
    arrive: dict[int, float] = {}
    end: dict[int, float] = {}
    prev_end: dict[Any, float] = {}
    for i in order:
        e = events[i]
        stream = (e.get("args") or {}).get("stream")
        a = max(float(e["ts"]), prev_end.get(stream, float("-inf")))
        arrive[i], end[i] = a, a + latest + float(e["dur"])
        prev_end[stream] = end[i]
    paths = []
    for r in range(world):
        evs = []
        n_seq: dict[str, int] = {}
        for i, e in enumerate(events):
            e = dict(e)
            if _is_collective(e):
                e["args"] = dict(e.get("args") or {})
                if seq:
                    pg = str(e["args"].get("Process Group Name", "?"))
                    e["args"]["Seq"] = n_seq.get(pg, 0)
                    n_seq[pg] = n_seq.get(pg, 0) + 1
                if not clock_shift_us:
                    start = arrive[i] + offset(r)
                    e["ts"], e["dur"] = start, end[i] - start
            elif _is_step(e) and r == late_rank and not clock_shift_us:
                e["ts"] = e["ts"] + lag_us
            if clock_shift_us and r == late_rank and "ts" in e:
                e["ts"] = e["ts"] + clock_shift_us
            evs.append(e)
        info = {**doc.get("distributedInfo", {}), "rank": r, "world_size": world}
        body = {**{k: v for k, v in doc.items() if k != "traceEvents"}, "distributedInfo": info, "traceEvents": evs}
        p = out / f"rank-{r}.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(body).encode(), 1))
        paths.append(p)
    return paths

"""What each remedy should gain in this capture: the method's "change one layer, measure again" made
checkable. Pure: reads the accounts, the signals and the thread table.

- **Amdahl** (G. Amdahl, AFIPS 1967): a remedy that removes a fraction ``f`` of a term holding share
  ``s`` of the limiting time speeds that resource up by ``1 / (1 - s x f)``. The limiting time is the
  busiest thread's busy time (an event loop or a model worker every request passes through; its waits
  for work and for a core, NOT_BUSY, left out: the host's core waits vary from run to run) when the
  term is that thread's work, else the account's busy time (its terms less waiting for work and for a
  core).
  ``f`` is a band per term kind (REMOVED): what the kind's first remedy typically removes. Throughput
  stops rising where the next thread saturates: the band is capped at 100 / that thread's CPU %.
  Only a saturated service gains throughput: its busiest thread ran or waited for a core at least
  SATURATED_PCT of the capture, or its threads waited for work under BUSY_IDLE_SHARE of their time
  (a loop that never idles); below capacity throughput follows the offered load: latency only.
- **Batching**: the per-item time of a batch-B forward against batch 1 by the roofline: the weights
  are read once per batch, so the arithmetic intensity grows ~B-fold until the ridge point; per item
  ``min(B, ridge / intensity)`` times faster. B is what the queue allows: the requests in flight
  (Little's law on the stage spans, else the accepted connections), at most BATCH_CAP.
- **Cores**: a host that starves the target gives back the time its busiest thread waited for a core.
- Latency (P50, P99) from the stage spans: the matching stage's share of request time cut by ``f``;
  where requests queue, the queue may drain once capacity exceeds the offered load, so the band's
  favourable end removes it too. The tail is assumed to move with the median.
"""
from __future__ import annotations

import re
from dataclasses import replace

from diagnose.account.kinds import CATEGORY_KIND, UNBATCHED
from diagnose.model import Account, AccountTerm, Quadrant, Signal, ThreadSummary, Verdict
from diagnose.results.gain import Band, BusiestThread, PredictedGain
from diagnose.signals.cpu import AGENT_THREAD_PREFIX  # the observer's own threads never cap the target
from diagnose.verdict.account import SATURATED_PCT  # the busiest thread's demand that caps throughput
from diagnose.verdict.remedy import remedy_for

BUSY_IDLE_SHARE = 0.2  # waiting for work under this share of thread-time: the workload never idles, saturated
MIN_SHARE = 0.05  # terms below this share of the account get no remedy of their own
MAX_GAINS = 4
MIN_ON_THREAD = 0.02  # a kind under this share of the busiest thread is not that thread's work
BATCH_CAP = 16  # the largest batch assumed (a common dynamic-batching maximum)
FIXED_CONCURRENCY = 0.8  # requests in flight at least this share of the client connections: closed loop
MAX_SPEEDUP_X = 100.0  # Amdahl's bound when a term is all of the limiting time and all of it goes
# CPU ridge points, FLOP/byte: a core's FP32 FMA peak over its share of DRAM bandwidth (traces/roofline.py:
# every x86/ARM server core above ~2; ~10 for a wide-vector core on a lightly shared memory channel).
CPU_RIDGE = (2.0, 10.0)
BATCH_EFFICIENCY = 0.5  # the band's low end: a batched forward reaches half the roofline's per-item gain
NATIVE_THREADS = "[native]"  # how the thread table names threads without a Python frame

# Fraction of a term's time its kind's first remedy removes (low, high), and what it assumes.
REMOVED: dict[str, tuple[float, float, str]] = {
    "cpu.serialization": (0.6, 0.9, "orjson/msgspec serialize numeric payloads 3-10x faster than json"),
    "cpu.tokenization": (0.5, 0.9, "a batched Rust tokenizer (HF tokenizers) is 2-10x faster than Python loops"),
    "cpu.python": (0.2, 0.5, "vectorizing or caching removes a part of the interpreted code, rarely all"),
    "cpu.preprocess": (0.3, 0.8, "SIMD decoders (pillow-simd, turbojpeg) or worker processes take most of it"),
    "cpu.input": (0.5, 0.95, "DataLoader workers overlap the input pipeline with the step"),
    "wait.input": (0.5, 0.95, "more DataLoader workers and prefetch hide the wait for the next batch"),
    "wait.loop_blocked": (0.7, 1.0, "an async client or run_in_executor frees the loop during the call"),
    "cpu.gc": (0.5, 0.9, "gc.freeze() and higher thresholds remove most collections"),
    "wait.gil": (0.3, 0.8, "worker processes (or native code that releases the GIL) remove most GIL waits"),
    "wait.lock": (0.3, 0.8, "a finer lock or a pool removes most of the wait"),
    "io.wait": (0.3, 0.8, "more concurrency to the peer or a cache hides part of its latency"),
    "io.copy": (0.3, 0.7, "fewer copies (sendfile, larger buffers) remove part of the kernel CPU"),
    "cpu.compute": (0.3, 0.6, "INT8 or a compiled runtime runs the model 1.5-2.5x faster"),
    "cpu.memory": (0.3, 0.7, "fusion and INT8 weights cut the bytes moved 1.5-3x"),
    "torch.ops": (0.3, 0.6, "INT8 or a compiled runtime runs the ops 1.5-2.5x faster"),
    "torch.between_ops": (0.3, 0.8, "moving Python and input work off the model's path removes most of it"),
    "gpu.compute": (0.2, 0.5, "FP8/INT8 kernels or a smaller model take 1.25-2x less GPU time"),
    "gpu.memory": (0.3, 0.7, "fused kernels and lower-precision tensors move 1.5-3x fewer bytes"),
    "gpu.idle_input": (0.5, 0.95, "DataLoader workers, pinned memory and prefetch hide most read waits"),
    "gpu.idle_host": (0.3, 0.8, "CUDA graphs or moving host work off the launch path close most gaps"),
    "gpu.idle_sync": (0.5, 0.9, "dropping .item()/.cpu() syncs and pageable copies removes most of the wait"),
    "gpu.idle_launch": (0.5, 0.9, "CUDA graphs or fused kernels remove most launch gaps"),
    "gpu.idle_outside": (0.3, 0.8, "feeding the GPU continuously removes part of the time it sits unused"),
    "gpu.comm_exposed": (0.3, 0.7, "overlapping collectives with compute hides part of them"),
    "torch.comm": (0.3, 0.7, "overlapping collectives with compute (or larger gradient buckets) hides part of them"),
    "stage.model": (0.3, 0.6, "INT8 or a compiled runtime runs the model 1.5-2.5x faster"),
    "stage.postprocess": (0.6, 0.9, "orjson/msgspec or binary tensors serialize 3-10x faster"),
    "stage.preprocess": (0.5, 0.9, "a batched native tokenizer/decoder is 2-10x faster"),
    "stage.network": (0.3, 0.8, "more concurrency to the peer or a cache hides part of its latency"),
    "stage.db": (0.3, 0.8, "an index, a cache or batched queries remove part of the database time"),
    "stage.queue": (0.3, 0.8, "more workers or batching shorten the queue"),
    UNBATCHED.kind: (0.5, 0.95, "batching drains the queue in front of the worker"),
    "wait.core": (0.5, 1.0, "dedicated cores give back most of the time spent waiting for one"),
}
DEFAULT_REMOVED = (0.3, 0.7, "the remedy removes part of the time, as its kind's remedies typically do")
# A thread-time kind -> the stage of the request spans whose time the same remedy cuts.
STAGE_OF: dict[str, str] = {
    "cpu.serialization": "stage.postprocess", "cpu.tokenization": "stage.preprocess",
    "cpu.preprocess": "stage.preprocess", "cpu.compute": "stage.model", "cpu.memory": "stage.model",
    "torch.ops": "stage.model", "gpu.compute": "stage.model", "gpu.memory": "stage.model",
    "io.wait": "stage.network", UNBATCHED.kind: "stage.queue", "wait.core": "stage.queue",
}


def _base(kind: str) -> str:
    return kind.rsplit(">", 1)[-1]


def _removed(kind: str) -> tuple[Band, str]:
    low, high, why = REMOVED.get(kind, REMOVED.get(_base(kind), DEFAULT_REMOVED))
    return Band(low=low, high=high), why


def _value(signals: dict[str, Signal], name: str) -> float | None:
    s = signals.get(name)
    return s.value if s is not None else None


def account_of(accounts: tuple[Account, ...], resource: str) -> Account | None:
    """The account of ``resource`` (threads, gpu, requests, torch_ops), or None."""
    return next((a for a in accounts if a.resource == resource), None)


def _amdahl(share: float, removed: Band) -> Band:
    """1 / (1 - s x f) for both ends of ``removed``; ``share`` held to 0..1 (rounded shares of the busiest
    thread can add up past its busy time) and the time left at least 1 / MAX_SPEEDUP_X: all of the
    limiting time removed is no finite speedup (and no division by zero)."""
    s = min(1.0, max(0.0, share))

    def x(f: float) -> float:
        return round(1 / max(1 / MAX_SPEEDUP_X, 1 - s * min(1.0, max(0.0, f))), 3)

    return Band(low=x(removed.low), high=x(removed.high))


def _busy(acc: Account) -> float:
    """The account's share off waiting for work and for a core: the time that serves the load."""
    return sum(t.share for t in acc.terms if t.quadrant is not None) or 1.0


def _same_work(t: ThreadSummary, kind: str) -> bool:
    """The thread mostly does the term's own work (a second model worker): the remedy shrinks it too."""
    own = CATEGORY_KIND.get(t.dominant_category or "")
    return own is not None and (own == _base(kind) or (own == "cpu.compute" and _base(kind) == "cpu.memory"))


def _next_thread(threads: tuple[ThreadSummary, ...], busiest: int | None, kind: str) -> ThreadSummary | None:
    """The busiest thread but the one that caps the service now; the observer's own, native threads
    (intra-op and BLAS pools) and threads doing the term's own work left out: their work shrinks with
    the remedy."""
    others = [t for t in threads if t.tid != busiest and t.cpu_pct and not t.name.startswith(AGENT_THREAD_PREFIX)
              and not t.name.startswith(NATIVE_THREADS) and not _same_work(t, kind)]
    return max(others, key=lambda t: t.cpu_pct or 0.0, default=None)


def _capped(band: Band, threads: tuple[ThreadSummary, ...], busiest: int | None, kind: str) -> tuple[Band, str]:
    nxt = _next_thread(threads, busiest, kind)
    if nxt is None or not nxt.cpu_pct or nxt.cpu_pct <= 0:
        return band, ""
    cap = max(1.0, 100.0 / nxt.cpu_pct)  # a thread sampled past 100% of a core: no gain, never a loss
    if cap >= band.high:
        return band, ""
    return (Band(low=round(min(band.low, cap), 3), high=round(cap, 3)),
            f"; capped at {cap:.1f}x where the next-busiest thread ({nxt.name}, {nxt.cpu_pct:.0f}% of a core) "
            "saturates")


def _latency(kind: str, removed: Band, requests: Account | None, saturated: bool) -> tuple[Band | None, str]:
    """The P50 ratio band from the request account's matching stage (and its queue)."""
    if requests is None:
        return None, ""
    stage = kind if kind.startswith("stage.") else STAGE_OF.get(_base(kind))
    shares = {t.kind: t.share for t in requests.terms}
    s = shares.get(stage or "", 0.0)
    queue = shares.get("stage.queue", 0.0) if saturated and stage != "stage.queue" else 0.0
    if s <= 0 and queue <= 0:
        return None, ""
    low = max(0.05, 1 - queue - s * removed.high)
    high = max(low, 1 - s * removed.low)
    why = f"; latency: {stage} holds {s:.0%} of request time" if s > 0 else ""
    if queue > 0:
        why += f", the queue ({queue:.0%}) drains at best"
    return Band(low=round(low, 3), high=round(high, 3)), why


def _fixed_concurrency(signals: dict[str, Signal]) -> tuple[float, float] | None:
    """(requests in flight, client connections) when the connections bound the concurrency (in flight
    at least FIXED_CONCURRENCY of them: every client waits on an answer), else None."""
    little, conns = _value(signals, "spans.in_flight_littles_law"), _value(signals, "tcp.in_flight_max")
    if little and conns and little >= FIXED_CONCURRENCY * conns:
        return little, conns
    return None


def _little(band: Band, signals: dict[str, Signal]) -> tuple[Band | None, str]:
    """At a fixed concurrency latency = in flight / throughput (Little's law): the latency band is
    the throughput band inverted."""
    fixed = _fixed_concurrency(signals)
    if fixed is None or band.low <= 0:
        return None, ""
    return (Band(low=round(1 / band.high, 3), high=round(1 / band.low, 3)),
            f"; latency by Little's law at a fixed concurrency ({fixed[0]:.0f} requests in flight, the clients' "
            f"{fixed[1]:.0f} connections): latency = in flight / throughput")


def _batching(term: AccountTerm, signals: dict[str, Signal]) -> tuple[Band, str]:
    """Per-item speedup of batching by the roofline, at the batch the queue allows."""
    in_flight = next((v for v in (_value(signals, "spans.in_flight_littles_law"), _value(signals, "tcp.in_flight_mean"))
                      if v), 2.0)
    b = max(2.0, min(float(BATCH_CAP), in_flight))
    ratio = _value(signals, "kernels.intensity_to_ridge_ratio")
    intensity = _value(signals, "kernels.intensity_flop_per_byte")
    if ratio:
        ideal_low = ideal_high = min(b, 1 / ratio)
        how = f"intensity {ratio:.2f}x the GPU's ridge point"
    elif intensity:
        ideal_low, ideal_high = min(b, CPU_RIDGE[0] / intensity), min(b, CPU_RIDGE[1] / intensity)
        how = f"{intensity:.2f} FLOP/byte against a CPU ridge of {CPU_RIDGE[0]:g}-{CPU_RIDGE[1]:g}"
    else:
        ideal_low, ideal_high = min(b, 2.0), b
        how = "no FLOP/byte in the trace: between 2x and the batch size"
    band = Band(low=round(max(1.0, ideal_low * BATCH_EFFICIENCY), 3), high=round(max(1.0, ideal_high), 3))
    return band, (f"batch {b:.0f} (Little's law: {in_flight:.1f} requests in flight, at most {BATCH_CAP}) "
                  f"against batch 1; per-item time by the roofline ({how}); a batched forward reaches "
                  f"{BATCH_EFFICIENCY:.0%}-100% of it")


# The busiest thread's time that is not per-request work: waiting for work (idle, a queue's get, an
# event loop awaiting) and waiting for a core (the host's, which varies from run to run).
NOT_BUSY = frozenset({"idle.work", "wait.core", "await", "handoff"})


def busy_fraction(busiest: BusiestThread) -> float:
    """The share of the busiest thread's sampled time spent on requests (NOT_BUSY left out)."""
    return max(0.0, 1.0 - sum(v for k, v in busiest.kinds.items() if k in NOT_BUSY))


def _on_busiest(kind: str, busiest: BusiestThread | None) -> float:
    """The kind's share of the busiest thread's busy time: what per-request time it holds there."""
    if busiest is None or busy_fraction(busiest) <= 0:
        return 0.0
    return min(1.0, busiest.kinds.get(_base(kind), 0.0) / busy_fraction(busiest))  # shares rounded: never past all


def predict(term: AccountTerm, remedy: str, acc: Account, accounts: tuple[Account, ...],
            signals: dict[str, Signal], threads: tuple[ThreadSummary, ...]) -> PredictedGain:
    """The predicted gain of the remedy of ``term`` (a term of ``acc``, the limiting account)."""
    threads_acc = account_of(accounts, "threads")
    busiest = threads_acc.busiest if threads_acc is not None else None
    demand = _value(signals, "cpu.max_thread_demand_pct") or _value(signals, "cpu.max_thread_util_pct")
    on_cpu_account = acc.resource in ("threads", "torch_ops")
    idle = sum(t.share for t in threads_acc.terms if t.kind == "idle.work") if threads_acc is not None else 0.0
    # a loop that never waits for work runs as fast as it can (a training loop, a batch job): saturated
    saturated = not on_cpu_account or idle < BUSY_IDLE_SHARE or (demand is not None and demand >= SATURATED_PCT)
    if not on_cpu_account:
        threads = ()  # the host threads of a GPU account spin in synchronisations: their CPU % caps nothing
    removed, why = _removed(term.kind)
    requests = account_of(accounts, "requests")
    p50, lat_why = _latency(term.kind, removed, requests, saturated)
    if term.kind == UNBATCHED.kind:
        band, how = _batching(term, signals)
        band, cap = _capped(band, threads, busiest.tid if busiest else None, term.kind)
        fixed, little = _little(band, signals)
        if fixed is not None:
            p50, lat_why = fixed, little
        return PredictedGain(remedy=remedy, term=term.kind, method="batching", basis="model worker", share=term.share,
                             throughput_x=band, p50_x=p50, p99_x=p50, assumption=how + cap + lat_why)
    on_thread = _on_busiest(term.kind, busiest) if on_cpu_account else 0.0
    if not saturated:
        return PredictedGain(remedy=remedy, term=term.kind, method="amdahl", basis="below capacity",
                             share=round(term.share, 4), removed=removed, p50_x=p50, p99_x=p50,
                             assumption=f"{why}; the busiest thread ran {demand or 0:.0f}% of a core and the threads "
                                        f"waited for work {idle:.0%} of their time: below capacity, throughput "
                                        f"follows the offered load{lat_why}")
    if _base(term.kind) == "wait.core":  # the host's share of the time: given back on dedicated cores
        core = busiest.kinds.get("wait.core", 0.0) if busiest is not None else 0.0
        if busiest is not None and core >= MIN_ON_THREAD:
            share, basis = core, f"busiest thread (tid {busiest.tid})"
            where = f"{core:.0%} of the busiest thread's time"
        else:
            share, basis, where = term.share, f"{acc.resource} account", f"{term.share:.0%} of the account's time"
    elif on_thread >= MIN_ON_THREAD and busiest is not None:
        share, basis = on_thread, f"busiest thread (tid {busiest.tid})"
        where = (f"{on_thread:.0%} of the busiest thread's busy time (tid {busiest.tid}, {demand or 0:.0f}% of a core "
                 "demanded; waits for work and for a core left out)")
    else:
        share, basis = min(1.0, term.share / _busy(acc)), f"{acc.resource} account"
        where = f"{share:.0%} of the {acc.resource} account's busy time"
    band, cap = _capped(_amdahl(share, removed), threads, busiest.tid if busiest and on_cpu_account else None,
                        term.kind)
    method = "cores" if _base(term.kind) == "wait.core" else "amdahl"
    fixed, little = _little(band, signals)
    if fixed is not None:
        p50, lat_why = fixed, little
    return PredictedGain(remedy=remedy, term=term.kind, method=method, basis=basis, share=round(share, 4),
                         removed=removed, throughput_x=band, p50_x=p50, p99_x=p50,
                         assumption=f"{term.label[:1].upper() + term.label[1:]} is {where}; {why} "
                                    f"({removed.low:.0%}-{removed.high:.0%} of it){cap}{lat_why}")


def predict_gains(verdict: Verdict, accounts: tuple[Account, ...], signals: dict[str, Signal],
                  threads: tuple[ThreadSummary, ...] = ()) -> tuple[PredictedGain, ...]:
    """Each remedy's predicted gain: the verdict's first remedy first, then those of the limiting
    account's next terms (at least MIN_SHARE of it, MAX_GAINS in all, one per remedy)."""
    acc = account_of(accounts, verdict.account or "") or (accounts[0] if accounts else None)
    if acc is None or verdict.quadrant is Quadrant.UNKNOWN:
        return ()
    if verdict.quadrant is Quadrant.NO_LOAD:
        return (PredictedGain(remedy=verdict.remedy or "", term="idle.work", method="none", basis="no load",
                              assumption="nothing limits the service at this load: a remedy buys headroom, not "
                                         "throughput; capture under representative load to predict one"),)
    terms = [t for t in acc.terms if t.quadrant is not None and t.share >= MIN_SHARE]
    if verdict.dedicated is not None:  # starved: dedicated cores first, then what the target's own work needs
        core = [t for t in acc.terms if _base(t.kind) == "wait.core"]
        if core:
            total = sum(t.share for t in core)
            terms = [replace(core[0], share=total), *terms]
    out: list[PredictedGain] = []
    for t in terms:
        remedy = verdict.remedy if t is terms[0] and verdict.dedicated is not None else remedy_for(t, signals)
        if not remedy or any(g.remedy == remedy for g in out):
            continue
        out.append(predict(t, remedy, acc, accounts, signals, threads))
    out.sort(key=lambda g: g.remedy != verdict.remedy)  # the verdict's first remedy first (stable)
    return tuple(out[:MAX_GAINS])


# Words the remedies share that name no remedy ("Replace json *with* orjson", "*Make* the model cheaper"):
# a change "tried something with the cache" names neither.
_COMMON = frozenset({"with", "without", "more", "less", "what", "each", "while", "from", "that", "this", "these",
                     "those", "into", "onto", "than", "then", "them", "they", "their", "there", "have", "only",
                     "also", "instead", "make", "made", "find", "check", "does", "done", "used", "uses", "using",
                     "when", "where", "which", "after", "before", "over", "under", "until", "some", "other",
                     "should", "would", "could", "about", "like", "just", "very", "much", "many", "most",
                     "fewer", "runs", "true", "false", "none", "every", "first", "part"})


NAMED = "the remedy the change names"


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3 and w not in _COMMON}


def gain_for(gains: tuple[PredictedGain, ...], change: str | None) -> tuple[PredictedGain | None, str]:
    """The gain of the remedy ``change`` names (most words in common with the remedy or its term),
    else the first remedy's; with how it was chosen."""
    if not gains:
        return None, "no remedy with a predicted gain in BASE"
    words = _words(change or "")
    scored = [(len(words & _words(g.remedy + " " + g.term)), i) for i, g in enumerate(gains)]
    best, i = max(scored, key=lambda s: (s[0], -s[1]))
    if best > 0:
        return gains[i], NAMED
    return gains[0], "BASE's first remedy" + (" (the change names none of BASE's remedies)" if change else "")


__all__ = ["NAMED", "account_of", "NOT_BUSY", "REMOVED", "busy_fraction", "gain_for", "predict", "predict_gains"]

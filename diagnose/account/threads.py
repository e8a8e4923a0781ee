"""Thread-time account: every sampled second of the target's threads, by what it was spent on.

The pieces (pieces.py: py-spy's segments x the kernel's readings, by term kind), corrected against
/proc CPU time and the agent's own holds (corrections.py), their waits on other threads attributed
to what those did meanwhile (attribution.py), become the account's terms here: a queue in front of
an unbatched model worker is its own term, a lock's waits are the service's to act on. Pure apart
from reading the bundle through the signal sources.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from diagnose.account.attribution import BIN_NS, attribute, included
from diagnose.account.corrections import calibrate, idle_loops, outside, ran_through_futex
from diagnose.account.kinds import KINDS, ON_CPU, UNBATCHED, TermKind
from diagnose.account.pieces import Piece, segment_pieces
from diagnose.bundle import Bundle
from diagnose.model import Account, AccountTerm, Layer, Signal
from diagnose.results.gain import BusiestThread
from diagnose.signals.thread_time import profiler_holds
from diagnose.signals.threads import ThreadUsage, bundle_thread_usage

WAIT_NAMES = {"lock": "lock", "handoff": "queue/handoff", "await": "event-loop"}
UNBATCHED_MAX_BATCH = 2.0  # model ops' leading dimension at most this: unbatched
# With queue and model stage spans, unbatched means requests queue for the worker at least as long as
# it serves them (the demo's unbatched scenario: 70% queue, 25% model at 3.2 in flight; its batch-1
# LLM: 24% queue, 74% model). Without them, this many requests in flight behind one worker.
UNBATCHED_MIN_IN_FLIGHT = 4.0
QUEUED_MIN = 2.0  # threads queued behind model work, in worker-equivalents, before it counts as a queue
# An event loop is one thread standing for all its in-flight requests (at least UNBATCHED_MIN_IN_FLIGHT
# when _unbatched holds): awaiting for this share of the model's busy time is the queue.
AWAITED_MIN = 0.5
# Profiled op time (calls with FLOPs) below LOW_INTENSITY_FLOP_PER_BYTE (traces/roofline.py: memory-bound
# on any CPU) at least this share: the model's CPU time is memory traffic, not arithmetic.
CPU_MEMORY_BOUND_TIME_PCT = 50.0
SRC = "py-spy stacks x /proc thread readings (state, wchan, schedstat)"
NATIVE_MIN_PCT = 5.0  # a thread without Python frames below this % of a core is an idle pool, not work


def _pieces(bundle: Bundle) -> tuple[list[Piece], dict[str, int]]:
    """Every py-spy segment of the target's own threads as pieces (pieces.py), corrected against
    /proc CPU time both ways, the agent's profiler holds cut out, idle event loops waiting for work.
    Also counts what was left out and why (data quality)."""
    usage = bundle_thread_usage(bundle)
    out, dropped = segment_pieces(bundle, usage)
    out, dropped["calibrated"] = calibrate(out, usage)
    out, dropped["futex_readings_ran"] = ran_through_futex(out, usage)
    out, held_ns = outside(out, profiler_holds(bundle))
    dropped["profiler_hold_ms"] = held_ns // 1_000_000
    return idle_loops(out, usage), {k: v for k, v in dropped.items() if v}


def _value(signals: dict[str, Signal], name: str) -> float | None:
    s = signals.get(name)
    return s.value if s is not None else None


def _unbatched(signals: dict[str, Signal]) -> bool:
    workers = _value(signals, "cpu.model_workers")
    if not workers:  # no thread busy with model work: nothing for requests to queue behind
        return False
    batch = _value(signals, "torch.model_batch_p50")
    if batch is None or batch > UNBATCHED_MAX_BATCH:
        return False
    queue, model = _value(signals, "spans.stage_share_pct[queue]"), _value(signals, "spans.stage_share_pct[model]")
    if queue is not None and model:  # stage spans say it: requests wait for the worker longer than it serves them
        return queue >= model
    in_flight = next((v for v in (_value(signals, "spans.in_flight_mean"), _value(signals, "tcp.in_flight_mean"))
                      if v is not None), None)
    return in_flight is not None and in_flight >= UNBATCHED_MIN_IN_FLIGHT


def _model_kinds(signals: dict[str, Signal]) -> dict[str, TermKind]:
    """``{"cpu.compute": cpu.memory}`` when a CPU-only torch trace (no GPU kernel groups) spent at
    least CPU_MEMORY_BOUND_TIME_PCT of its op time in calls of low arithmetic intensity."""
    low = _value(signals, "kernels.low_intensity_time_pct")
    on_gpu = _value(signals, "kernels.group_share_pct[compute]") is not None
    if low is None or on_gpu or low < CPU_MEMORY_BOUND_TIME_PCT:
        return {}
    return {"cpu.compute": KINDS["cpu.memory"]}


def _queued(wait: str, waited_s: float, model_s: float) -> bool:
    """Waits behind model work that make a queue: handler threads (``handoff``) in QUEUED_MIN worker
    equivalents, or an event loop (``await``: one thread for all its requests) AWAITED_MIN of it."""
    if wait == "handoff":
        return waited_s >= QUEUED_MIN * model_s
    return wait == "await" and waited_s >= AWAITED_MIN * model_s


def _native(usage: dict[int, ThreadUsage], pieces: list[Piece]) -> tuple[float, float, int]:
    """The threads py-spy never saw (no Python frames: a BLAS or OpenMP pool doing the model's math)
    over the sampled span of the pieces: (s on a CPU, s waiting for one, threads). Their /proc CPU
    and run-queue time (schedstat) over the readings' span, scaled to the pieces' span; their sleep
    is not counted (an idle pool is not the service waiting for work). Threads under
    NATIVE_MIN_PCT of a core are left out."""
    seen = {p.tid for p in pieces}
    times = [r.t_ns for tid, tu in usage.items() if tid not in seen for r in tu.readings]
    if not times or max(times) <= min(times):
        return 0.0, 0.0, 0
    read_s = (max(times) - min(times)) / 1e9
    sampled_s = (max(p.end_ns for p in pieces) - min(p.start_ns for p in pieces)) / 1e9
    scale = min(sampled_s, read_s) / read_s
    ran = waited = 0.0
    threads = 0
    for tid, tu in usage.items():
        if tid in seen or tu.cpu_s < NATIVE_MIN_PCT / 100 * read_s:
            continue
        st = tu.schedstat()
        ran += tu.cpu_s * scale
        waited += (st[1] / 1e9 if st is not None and 0 <= st[1] < 2**62 else 0.0) * scale
        threads += 1
    return ran, min(waited, threads * sampled_s), threads


def thread_account(bundle: Bundle, signals: dict[str, Signal]) -> Account | None:
    """The thread-time account, or None without py-spy stacks on the Unix clock. Threads without
    Python frames count with their CPU time (``_native``)."""
    pieces, dropped = _pieces(bundle)
    if not pieces:
        return None
    kept = included(pieces)
    own, attributed = attribute(kept)
    native_s, native_wait_s, natives = _native(bundle_thread_usage(bundle), pieces)
    if native_s > 0:
        own["cpu.native"] = own.get("cpu.native", 0.0) + native_s
        own["wait.core"] = own.get("wait.core", 0.0) + native_wait_s
    total = sum(own.values()) + sum(attributed.values())
    if total <= 0:
        return None
    threads = len({p.tid for p in kept})
    left_out = len({p.tid for p in pieces}) - threads
    terms: list[AccountTerm] = []
    kinds = _model_kinds(signals)
    for kind, s in own.items():
        k = kinds.get(kind, KINDS[kind])
        terms.append(_term(k, k.kind, k.label, s, total, f"{s:.2f} of {total:.2f} thread-s"))
    unbatched = _unbatched(signals)
    merged: dict[str, tuple[TermKind, str, float, str]] = {}
    for (wait, kind), s in attributed.items():
        target = kinds.get(kind, KINDS[kind])
        what = {"lock": "lock waits", "handoff": "waits on other threads (queue, event, result)",
                "await": "an event loop awaiting with requests in flight"}[wait]
        if kind == "cpu.compute" and unbatched and _queued(wait, s, own.get("cpu.compute", 0.0)):
            k, key, label = UNBATCHED, UNBATCHED.kind, UNBATCHED.label
        else:
            key = f"{wait}>{kind}"
            # a lock is the service's own code (a pool of one, a global lock): the quadrant is what
            # its holders do, the first place to act is the lock
            k = replace(target, layer=Layer.SERVICE, rule_id="secondary.lock_contention") if wait == "lock" \
                and target.quadrant is not None else target
            label = f"{WAIT_NAMES[wait]} wait, the other threads meanwhile: {target.label}"
        prev = merged.get(key)
        merged[key] = (k, label, s + (prev[2] if prev else 0.0),
                       f"{what} while other threads were in: {target.label} (same {BIN_NS // 1_000_000} ms bins)")
    for key, (k, label, s, why) in merged.items():
        terms.append(_term(k, key, label, s, total, f"{s:.2f} of {total:.2f} thread-s: {why}"))
    terms.sort(key=lambda t: -t.share)
    notes = [f"{threads} thread(s) accounted"]
    if natives:
        notes.append(f"{natives} thread(s) without Python frames (BLAS/OpenMP pools) counted by their CPU time "
                     f"(/proc): {native_s:.2f} thread-s on a CPU, {native_wait_s:.2f} waiting for one")
    calibrated = dropped.pop("calibrated", 0)
    futex_ran = dropped.pop("futex_readings_ran", 0)
    if futex_ran:
        notes.append(f"{futex_ran} thread(s) read asleep in a futex used the CPU time of running through those "
                     "readings (/proc CPU time): that part counted as what their stacks show, not as GIL waits")
    held_ms = dropped.pop("profiler_hold_ms", 0)
    if held_ms:
        notes.append(f"{held_ms / 1e3:.2f} thread-s inside the agent's torch profiler holds (stop and export) "
                     "left out: the observer held the target's threads then (the report's cost line says it)")
    io_unseen = dropped.pop("io_frames_without_io_waits", 0)
    if io_unseen:
        notes.append(f"{io_unseen} socket/file stack(s) without a /proc reading counted as lock/GIL waits: the "
                     "kernel never saw the target's threads in an IO wait")
    if calibrated:
        notes.append(f"{calibrated} thread(s) ran less than py-spy sampled them running (/proc CPU time): "
                     "the rest counted as lock waits")
    if dropped:
        notes.append("left out: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(dropped.items())))
    if left_out:
        notes.append(f"{left_out} thread(s) that only waited for work (listeners, idle pools) left out")
    return Account("threads", "sampled thread-time of the target", "thread-s", total, tuple(terms), tuple(notes),
                   SRC, busiest=_busiest(kept, {k: v.kind for k, v in kinds.items()}))


def _busiest(pieces: list[Piece], renamed: dict[str, str]) -> BusiestThread | None:
    """The thread that demanded the most CPU (ran, or was runnable: waited for a core or the GIL), the
    one a saturated service funnels its requests through, and its own time by kind (a wait on
    another thread under its wait's name: ``handoff``, ``lock``, ``await``; ``renamed``: kinds the
    account names otherwise, as _model_kinds says)."""
    demand: dict[int, float] = defaultdict(float)
    for p in pieces:
        if p.kind in ON_CPU or p.kind in ("wait.core", "wait.gil"):
            demand[p.tid] += p.end_ns - p.start_ns
    if not demand:
        return None
    tid = max(demand, key=demand.__getitem__)
    kinds: dict[str, float] = defaultdict(float)
    for p in pieces:
        if p.tid == tid:
            kinds[renamed.get(p.kind, p.kind)] += p.end_ns - p.start_ns
    total = sum(kinds.values())
    return BusiestThread(tid=tid, sampled_s=round(total / 1e9, 4),
                         kinds={k: round(v / total, 4) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])})


def _term(k: TermKind, kind: str, label: str, s: float, total: float, evidence: str) -> AccountTerm:
    return AccountTerm(kind, label, s / total, s, k.quadrant, k.layer, evidence, k.rule_id)


__all__ = ["thread_account"]

"""Request-time account from a serving engine's own /metrics: each phase's share of the end-to-end
time of the requests that finished in the capture window.

vLLM: queue, prefill, decode (``request_{queue,prefill,decode}_time_seconds``); TGI: queue and
inference; SGLang: queue and the rest of the request (``e2e - queue``), of which the share of the
window its GPU waited for the CPU scheduler (``gpu_overlap_wait_seconds``) is the scheduler's; Triton:
queue, compute_input + compute_output and compute_infer (its cumulative duration counters). The
phase sums are increases over the window (diagnose/signals/serving_metrics.py), so they are exact,
not bucket-interpolated. Pure: reads ``details.serving`` (diagnose/results/serving.py ServingDetails).
"""
from __future__ import annotations

from diagnose.account.kinds import KINDS
from diagnose.model import Account, AccountTerm
from diagnose.results.details import Details, ServingDetails

SRC = "serving engine /metrics, increase over the capture window"
# canonical signals (histogram sums or Triton duration counters) -> term kind
PHASES: tuple[tuple[str, str], ...] = (
    ("queue", "engine.queue"), ("prefill", "engine.prefill"), ("decode", "engine.decode"),
    ("inference", "engine.inference"), ("queue_total", "engine.queue"),
    ("compute_infer_total", "engine.compute_infer"), ("compute_input_total", "engine.tensor_io"),
    ("compute_output_total", "engine.tensor_io"),
)


def _seconds(serving: ServingDetails, key: str) -> float | None:
    """Summed seconds of one phase over the window, from a histogram (mean x count) or a duration counter."""
    h = serving.histograms.get(key)
    if h is not None and h.mean_s is not None and h.count:
        return h.mean_s * h.count
    r = serving.rates.get(key)
    return r.increase if r is not None else None


RUNNING = ("engine.inference", "engine.prefill", "engine.decode")


def _scheduler_wait(serving: ServingDetails, seconds: dict[str, float]) -> list[str]:
    """SGLang: while requests ran in the engine its GPU forward stream sat idle ``overlap`` of the
    time waiting for the CPU scheduler; that part of their running time moves to its own term."""
    wait = serving.rates.get("overlap_wait")
    if wait is None or serving.window_s <= 0 or wait.increase <= 0:
        return []
    share = min(1.0, wait.increase / serving.window_s)
    for kind in RUNNING:
        if kind in seconds:
            moved = seconds[kind] * share
            seconds[kind] -= moved
            seconds["engine.scheduler_wait"] = seconds.get("engine.scheduler_wait", 0.0) + moved
    return [f"the GPU waited for the CPU scheduler {share:.0%} of the window (gpu_overlap_wait_seconds): "
            "that share of the requests' running time is attributed to it"]


def _requests(serving: ServingDetails) -> int | None:
    """Requests that finished in the window: the e2e histogram's count, else the success counter's."""
    e2e, ok = serving.histograms.get("e2e"), serving.rates.get("requests")
    n = (e2e.count if e2e is not None else 0) or (ok.increase if ok is not None else 0)
    return int(n) if n else None


def engine_account(details: Details) -> Account | None:
    serving = details.serving
    if serving is None:
        return None
    total = _seconds(serving, "e2e")
    if total is None:
        total = _seconds(serving, "e2e_total")
    if not total or total <= 0:
        return None
    seconds: dict[str, float] = {}
    for key, kind in PHASES:
        s = _seconds(serving, key)
        if s is not None and s > 0:
            seconds[kind] = seconds.get(kind, 0.0) + s
    notes = ["request time outside the phases the engine measures is not attributed"]
    if set(seconds) == {"engine.queue"}:  # SGLang: only the queue is measured apart
        seconds["engine.inference"] = max(0.0, total - seconds["engine.queue"])
        notes = ["the engine measures only its queue apart: the rest of each request is shown as inference"]
    notes += _scheduler_wait(serving, seconds)
    over = sum(seconds.values()) / total
    if over > 1.0:  # phases overlap or clocks differ: a partition cannot exceed 1
        seconds = {k: v / over for k, v in seconds.items()}
        notes.append(f"the phases add up to {over:.0%} of end-to-end time: scaled to add up to 1")
    engine = serving.engine or "engine"
    terms = [AccountTerm(k.kind, k.label, s / total, s, k.quadrant, k.layer,
                         f"{100 * s / total:.0f}% of {total:.1f} request-s ({engine} /metrics)", k.rule_id)
             for kind, s in seconds.items() for k in [KINDS[kind]]]
    terms.sort(key=lambda t: -t.share)
    return Account("requests", f"request time in the serving engine ({engine} /metrics)", "request-s", total,
                   tuple(terms), tuple(notes), SRC, _requests(serving))


__all__ = ["engine_account"]

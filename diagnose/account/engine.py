"""Request-time account from a serving engine's own /metrics: each phase's share of the end-to-end
time of the requests that finished in the capture window.

vLLM: queue, prefill, decode (``request_{queue,prefill,decode}_time_seconds``); TGI: queue and
inference; SGLang: queue and the rest of the request (``e2e - queue``), of which the share of the
window its GPU waited for the CPU scheduler (``gpu_overlap_wait_seconds``) is the scheduler's; Triton:
queue, compute_input + compute_output and compute_infer (its cumulative duration counters). The
phase sums are increases over the window (diagnose/signals/serving_metrics.py), so they are exact,
not bucket-interpolated. Pure: reads ``details["serving"]``.
"""
from __future__ import annotations

from typing import Any

from diagnose.account.kinds import KINDS
from diagnose.model import Account, AccountTerm

SRC = "serving engine /metrics, increase over the capture window"
# canonical signals (histogram sums or Triton duration counters) -> term kind
PHASES: tuple[tuple[str, str], ...] = (
    ("queue", "engine.queue"), ("prefill", "engine.prefill"), ("decode", "engine.decode"),
    ("inference", "engine.inference"), ("queue_total", "engine.queue"),
    ("compute_infer_total", "engine.compute_infer"), ("compute_input_total", "engine.tensor_io"),
    ("compute_output_total", "engine.tensor_io"),
)


def _seconds(serving: dict[str, Any], key: str) -> float | None:
    """Summed seconds of one phase over the window, from a histogram (mean x count) or a duration counter."""
    h = (serving.get("histograms") or {}).get(key)
    if isinstance(h, dict) and h.get("mean_s") is not None and h.get("count"):
        return float(h["mean_s"]) * float(h["count"])
    r = (serving.get("rates") or {}).get(key)
    return float(r["increase"]) if isinstance(r, dict) and isinstance(r.get("increase"), (int, float)) else None


RUNNING = ("engine.inference", "engine.prefill", "engine.decode")


def _scheduler_wait(serving: dict[str, Any], seconds: dict[str, float]) -> list[str]:
    """SGLang: while requests ran in the engine its GPU forward stream sat idle ``overlap`` of the
    time waiting for the CPU scheduler; that part of their running time moves to its own term."""
    wait = (serving.get("rates") or {}).get("overlap_wait") or {}
    window = serving.get("window_s") or 0.0
    if not isinstance(wait.get("increase"), (int, float)) or window <= 0 or wait["increase"] <= 0:
        return []
    share = min(1.0, wait["increase"] / window)
    for kind in RUNNING:
        if kind in seconds:
            moved = seconds[kind] * share
            seconds[kind] -= moved
            seconds["engine.scheduler_wait"] = seconds.get("engine.scheduler_wait", 0.0) + moved
    return [f"the GPU waited for the CPU scheduler {share:.0%} of the window (gpu_overlap_wait_seconds): "
            "that share of the requests' running time is attributed to it"]


def engine_account(details: dict[str, Any]) -> Account | None:
    serving = details.get("serving") or {}
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
    requests = (serving.get("histograms") or {}).get("e2e", {}).get("count") or (
        (serving.get("rates") or {}).get("requests", {}).get("increase"))
    engine = serving.get("engine") or "engine"
    terms = [AccountTerm(k.kind, k.label, s / total, s, k.quadrant, k.layer,
                         f"{100 * s / total:.0f}% of {total:.1f} request-s ({engine} /metrics)", k.rule_id)
             for kind, s in seconds.items() for k in [KINDS[kind]]]
    terms.sort(key=lambda t: -t.share)
    return Account("requests", f"request time in the serving engine ({engine} /metrics)", "request-s", total,
                   tuple(terms), tuple(notes), SRC, int(requests) if requests else None)


__all__ = ["engine_account"]

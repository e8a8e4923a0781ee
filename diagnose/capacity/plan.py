"""plan(report, target) -> Plan: instances, concurrency and cost per 1M tokens. Pure arithmetic.

- Concurrency by Little's law: in-flight = QPS x mean latency (s).
- Instances = ceil(target QPS / per-instance QPS x headroom), per-instance QPS being the capture's
  measured QPS. That assumes the capture ran the instance near its knee (the most QPS it serves
  within the SLO): a capture below the knee overstates the instances needed (a no-load verdict
  says so first in the notes), one past it (P99 over the SLO) understates them: capture at a few
  offered loads to find the knee.
- Cost per 1M tokens = GPU-hour price x GPU-hours per 1M tokens, from the measured output tokens/s:
  GPU-hours per 1M tokens = GPUs per instance x 1e6 / (tokens/s x 3600).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from diagnose.model import Quadrant, Report

DEFAULT_HEADROOM = 1.3
MAX_INPUT = 1e12  # larger targets, prices or SLOs are typos, and their products overflow JSON
MIN_MEASURED = 1e-6  # a measured QPS, latency (ms) or tokens/s below this is no measurement
MAX_GPUS = 100_000


class PlanError(ValueError):
    """The capture lacks what the plan needs (no request rate measured), or an input is not valid."""


@dataclass(frozen=True)
class Target:
    qps: float  # requests/s the service must serve
    slo_p99_ms: float | None = None
    headroom: float = DEFAULT_HEADROOM
    gpu_hour_price: float | None = None  # currency units per GPU-hour
    gpus_per_instance: int = 1


@dataclass(frozen=True)
class Plan:
    per_instance_qps: float
    mean_latency_ms: float
    p99_ms: float | None
    instances: int
    in_flight_total: float  # Little's law at the target QPS
    in_flight_per_instance: float
    tokens_per_s: float | None
    cost_per_1m_tokens: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"notes": list(self.notes)}


def littles_law_in_flight(qps: float, mean_latency_s: float) -> float:
    """Requests in flight = arrival rate (1/s) x time in the system (s)."""
    return qps * mean_latency_s


def instances_needed(target_qps: float, per_instance_qps: float, headroom: float = DEFAULT_HEADROOM) -> int:
    """ceil(target / per-instance x headroom)."""
    return max(1, math.ceil(target_qps / per_instance_qps * headroom - 1e-9))


def cost_per_1m_tokens(gpu_hour_price: float, tokens_per_s: float, gpus: int = 1) -> float:
    """Price per GPU-hour x GPU-hours per 1M output tokens."""
    return gpu_hour_price * gpus * 1e6 / (tokens_per_s * 3600.0)


def check_measured(name: str, v: float | None, unit: str) -> None:
    """Raises PlanError for a measured rate or latency no plan can rest on (a hand-edited bundle or
    sweep: 1e-320 QPS would plan 1e320 instances)."""
    if v is not None and not (math.isfinite(v) and MIN_MEASURED <= v <= MAX_INPUT):
        raise PlanError(f"the measured {name} ({v:g} {unit}) is outside {MIN_MEASURED:g}-{MAX_INPUT:g}: not a rate "
                        "to plan on; capture again")


def check_target(t: Target) -> None:
    """Raises PlanError when an input of ``t`` is not a positive finite number."""
    for name, v in (("target QPS", t.qps), ("headroom", t.headroom)):
        if not (math.isfinite(v) and 0 < v <= MAX_INPUT):
            raise PlanError(f"{name} must be a positive number up to {MAX_INPUT:g}, not {v}")
    for name, opt in (("SLO P99", t.slo_p99_ms), ("GPU-hour price", t.gpu_hour_price)):
        if opt is not None and not (math.isfinite(opt) and 0 < opt <= MAX_INPUT):
            raise PlanError(f"{name} must be a positive number up to {MAX_INPUT:g}, not {opt}")
    if not 1 <= t.gpus_per_instance <= MAX_GPUS:
        raise PlanError(f"GPUs per instance must be 1 to {MAX_GPUS:,}, not {t.gpus_per_instance}")
    if t.headroom < 1.0:
        raise PlanError(f"headroom {t.headroom:g} is below 1: it would plan fewer instances than the load needs; "
                        "use 1.0 for none (1.3 is the method's default)")


def plan(report: Report, target: Target) -> Plan:
    """The plan for ``target`` from ``report``'s measured requests. Raises PlanError."""
    check_target(target)
    req = report.analysis.details.requests
    qps = req.qps if req is not None else None
    mean_ms = req.latency.mean_ms if req is not None and req.latency is not None else None
    if req is None or not req.requests or not qps or not mean_ms:
        raise PlanError("no request rate in this capture: plan needs stage spans (start the service under "
                        "`diagnose run`, or send OTLP spans) so QPS and latency are measured")
    check_measured("QPS", qps, "1/s")
    check_measured("mean latency", mean_ms, "ms")
    p99 = req.latency.p99_ms if req.latency is not None else None
    notes = [f"assumes the capture ran near the instance's knee ({qps:.1f} QPS measured): capture at a few offered "
             "loads to find where P99 starts to climb"]
    if report.analysis.verdict.quadrant is Quadrant.NO_LOAD:
        notes.insert(0, f"the verdict is no load: the instance mostly waited for work, so {qps:.1f} QPS is what was "
                        "offered, not what it can serve, and these instances overstate the need; capture under "
                        "representative load, or find the knee with `diagnose sweep` and plan with --sweep")
    if target.slo_p99_ms is not None and p99 is not None and p99 > target.slo_p99_ms:
        notes.append(f"the capture's P99 {p99:.1f} ms is over the SLO {target.slo_p99_ms:g} ms: an instance serves "
                     "fewer than the measured QPS within the SLO, so more instances than planned are needed")
    tokens = (report.analysis.signals.get("llm.output_tokens_per_s") or None)
    tps = tokens.value if tokens is not None and tokens.value else None
    check_measured("output tokens/s", tps, "1/s")
    cost = None
    if target.gpu_hour_price is not None:
        if tps:
            cost = cost_per_1m_tokens(target.gpu_hour_price, tps, target.gpus_per_instance)
        else:
            notes.append("no output tokens/s measured (spans without gen_ai.usage.output_tokens): "
                         "no cost per 1M tokens")
    n = instances_needed(target.qps, qps, target.headroom)
    in_flight = littles_law_in_flight(target.qps, mean_ms / 1e3)
    return Plan(qps, mean_ms, p99, n, in_flight, in_flight / n, tps, cost, tuple(notes))


__all__ = ["Plan", "PlanError", "Target", "check_measured", "check_target", "cost_per_1m_tokens", "instances_needed",
           "littles_law_in_flight", "plan"]

"""The report's environment line and its "cost of this capture" line. Pure: reads the manifest
through Bundle.info (``tool``, ``target``, ``host``, ``cost``, ``budget``, the agent's counts, written by
diagnose/capture/session.py, cost.py and budget.py) and
the bundle's torch index (TORCH records: ``torch_version``) and NVML (driver, device names) records."""
from __future__ import annotations

from typing import Any

from diagnose.bundle.records.manifest import CaptureCost, CollectorCounts, ManifestInfo, OverheadBudget
from diagnose.bundle.streams import TORCH
from diagnose.model import Report
from diagnose.render.markdown.gfm import text
from diagnose.render.units import fmt_value


def _torch_version(report: Report) -> str | None:
    versions = {r.torch_version for r in report.bundle.typed(TORCH) if r.torch_version}
    return ", ".join(sorted(versions)) or None


def _gpus(report: Report) -> list[str]:
    from diagnose.signals.gpu_series import read_nvml

    nv = read_nvml(report.bundle)
    names: dict[str, int] = {}
    for dev in nv.devices.values():
        name = dev.name or "GPU"
        names[name] = names.get(name, 0) + 1
    out = [f"{n} x {name}" for name, n in names.items()]
    driver = nv.host.driver_version if nv.host is not None else None
    return out + ([f"NVIDIA driver {driver}"] if driver else [])


def environment_bits(report: Report) -> list[str]:
    """diagnose, Python, target, torch, GPUs and driver, host OS/CPU/memory: GFM-escaped pieces."""
    info = report.bundle.info
    tool, t, host = info.tool, info.target, info.host
    bits = [f"diagnose {text(_known(tool.version))} (Python {text(_known(tool.python))})",
            f"target {text(t.exe or t.name or '?')}"]
    torch = _torch_version(report)
    bits += [f"torch {text(torch)} (the target's)"] if torch else []
    bits += [text(g) for g in _gpus(report)]
    if host.os:
        bits.append(f"host {text(host.os)} {text(host.machine or '')}".rstrip())
    if host.cpu or host.cpus:
        bits.append(f"CPU {text(host.cpu or '?')} x {text(_known(host.cpus))} logical")
    if host.memory_bytes is not None:
        bits.append(f"memory {fmt_value(float(host.memory_bytes), 'bytes')}")
    return bits


def _known(value: Any) -> Any:
    return "?" if value is None else value


def _agent_cost(info: ManifestInfo) -> str:
    """What the in-target agent's torch windows held the target (its own measure of each stop and
    export, diagnose/agent/inproc/windowplan.py) and what its span work cost (spanbudget.py)."""
    agent = info.collector("agent")
    if agent is None or agent.state not in ("ok", "partial"):
        return ""
    counts = agent.counts_as(CollectorCounts)
    return _torch_cost(counts) + _span_cost(counts)


def _span_cost(c: CollectorCounts) -> str:
    cpu_s, pct = c.spans_cpu_s, c.spans_cpu_pct
    if cpu_s is None or pct is None or not c.spans_seen:
        return ""
    budget, fraction = c.spans_cpu_budget_pct, c.spans_keep_fraction
    said = f", budget {budget:g}%" if budget else ""
    sampled = f", keeping 1 trace in {round(1 / fraction)}" if fraction and 0 < fraction < 1 else ""
    return f" The agent's span work used {cpu_s:.2f} s of CPU ({pct:.1f}% of a core{said}){sampled}."


def _torch_cost(c: CollectorCounts) -> str:
    hold, windows = c.torch_hold_max_ms, c.torch_traces
    if hold is None or not windows:
        return " The in-target agent ran no torch window."
    total, profiled = c.torch_hold_total_ms or 0.0, c.torch_window_s or 0.0
    budget = c.torch_hold_budget_ms
    said = f" (budget {budget:.0f} ms per hold)" if budget else ""
    share, duty = c.torch_profiled_share_pct, c.torch_duty_budget_pct
    of = (f", {share:.1f}% of the capture" + (f" (budget {duty:g}%)" if duty else "")) if share is not None else ""
    return (f" The agent's {windows:.0f} torch windows ({profiled:.2f} s profiled{of}) held the target at most "
            f"{hold:.1f} ms at a time, {total:.0f} ms in all{said}.")


def _budget(b: OverheadBudget | None) -> str:
    """The overhead budget and what it gave up (diagnose/capture/budget.py)."""
    pct = b.pct_of_core if b is not None else None
    if b is None or pct is None:
        return ""
    asked, final, peak = b.asked, b.final, b.used_pct_of_core_max
    said = f" Overhead budget {pct:g}% of one core" + (f" (peak {peak:.0f}% in a 2 s period)" if peak else "")
    gave = [f"py-spy at {text(final.pyspy_hz)} Hz instead of {text(asked.pyspy_hz)}"
            if final.pyspy_hz != asked.pyspy_hz else "",
            f"process readings at {text(final.process_hz)} Hz instead of {text(asked.process_hz)}"
            if final.process_hz != asked.process_hz else ""]
    gave = [g for g in gave if g]
    if not b.changes:
        return said + ": nothing was lowered."
    why = text(b.changes[0].why)
    return said + ": " + ("; ".join(gave) if gave else "rates lowered, then raised back") + f" (first change: {why})."


def cost_line(report: Report) -> str:
    """One sentence: diagnose's CPU as a share of a core and of the host, its children's, its peak
    memory, how long the agent's torch windows held the target, and (right after an attach) how
    long after the capture's end the verdict came."""
    return _cost(report) + _verdict_after(report)


def _cost(report: Report) -> str:
    info = report.bundle.info
    cost = info.cost
    if cost is None:
        why = "imported files" if info.end_reason == "imported" else "a bundle without the record"
        return f"**Cost of this capture**: not recorded ({why})."
    wall, own, kids, cpus = cost.wall_s, cost.diagnose_cpu_s, cost.children_cpu_s, cost.host_cpus
    if not wall or own is None:
        return "**Cost of this capture**: not recorded (incomplete record)."
    host = f", {100 * own / wall / cpus:.1f}% of the host's {cpus:.0f} CPUs" if cpus and cpus >= 1 else ""
    parts = [f"diagnose used {own:.2f} s of CPU in {wall:.1f} s ({100 * own / wall:.1f}% of one core{host})"]
    if kids is not None:
        ahead = cost.parse_ahead_cpu_s
        of_it = f", {ahead:.2f} s of it parsing py-spy windows and torch traces ahead" if ahead else ""
        parts.append(f"its child processes (py-spy; the parse-ahead child; the live view's analyses) {kids:.2f} s "
                     f"({100 * kids / wall:.1f}% of one core{of_it})")
    if cost.max_rss_bytes:
        parts.append(f"peak memory {fmt_value(cost.max_rss_bytes, 'bytes')}")
    tail = _budget(info.budget) + _agent_cost(info) + _priority(cost)
    return "**Cost of this capture**: " + "; ".join(parts) + "." + tail


def _verdict_after(report: Report) -> str:
    """How long after the capture's end the verdict came (said by the attach that captured it)."""
    after = report.verdict_after_s
    return f" The verdict came {after:.2f} s after the capture ended." if after is not None else ""


def _priority(cost: CaptureCost) -> str:
    """At which CPU priority the collectors ran (collectors/priority.py), when the record says."""
    if not cost.collector_priority:
        return ""
    got = sorted({str(v) for v in cost.collector_priority.values()})
    lowest = all(g == "nice 19" for g in got)
    return (f" Collectors and py-spy ran at {text(', '.join(got))}" + (
        ": the target's threads had the cores first (on a saturated host py-spy waits its turn, hence "
        "the window gaps)." if lowest else "."))


__all__ = ["cost_line", "environment_bits"]

"""The report's environment line and its "cost of this capture" line. Pure: reads the manifest
(``tool``, ``target``, ``host``, ``cost``, written by diagnose/capture/session.py and cost.py) and
the bundle's torch index (TORCH records: ``torch_version``) and NVML (driver, device names) records."""
from __future__ import annotations

from typing import Any

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
    m = report.manifest
    tool, t = m.get("tool") or {}, m.get("target") or {}
    raw = m.get("host")
    host: dict[str, Any] = raw if isinstance(raw, dict) else {}
    bits = [f"diagnose {text(tool.get('version', '?'))} (Python {text(tool.get('python', '?'))})",
            f"target {text(t.get('exe') or t.get('name') or '?')}"]
    torch = _torch_version(report)
    bits += [f"torch {text(torch)} (the target's)"] if torch else []
    bits += [text(g) for g in _gpus(report)]
    if host.get("os"):
        bits.append(f"host {text(host['os'])} {text(host.get('machine', ''))}".rstrip())
    if host.get("cpu") or host.get("cpus"):
        bits.append(f"CPU {text(host.get('cpu') or '?')} x {text(host.get('cpus', '?'))} logical")
    if isinstance(host.get("memory_bytes"), int):
        bits.append(f"memory {fmt_value(float(host['memory_bytes']), 'bytes')}")
    return bits


MAX_NUMBER = 1e15  # no cost, count or budget in a manifest comes near it: a larger one is not a reading


def _num(d: dict[str, Any], key: str) -> float | None:
    """A non-negative, finite, plausible number from a manifest record (hostile or torn: anything else is None)."""
    v = d.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not -1 < v < MAX_NUMBER:
        return None
    return float(v) if v >= 0 else None


def _agent_cost(m: dict[str, Any]) -> str:
    """What the in-target agent's torch windows held the target (its own measure of each stop and
    export, diagnose/agent/inproc/windowplan.py) and what its span work cost (spanbudget.py)."""
    agent = next((c for c in m.get("collectors", []) if isinstance(c, dict) and c.get("name") == "agent"), None)
    if agent is None or agent.get("state") not in ("ok", "partial"):
        return ""
    raw = agent.get("counts")
    counts: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return _torch_cost(counts) + _span_cost(counts)


def _span_cost(counts: dict[str, Any]) -> str:
    cpu_s, pct = _num(counts, "spans_cpu_s"), _num(counts, "spans_cpu_pct")
    if cpu_s is None or pct is None or not _num(counts, "spans_seen"):
        return ""
    budget = _num(counts, "spans_cpu_budget_pct")
    fraction = _num(counts, "spans_keep_fraction")
    said = f", budget {budget:g}%" if budget else ""
    sampled = f", keeping 1 trace in {round(1 / fraction)}" if fraction and 0 < fraction < 1 else ""
    return f" The agent's span work used {cpu_s:.2f} s of CPU ({pct:.1f}% of a core{said}){sampled}."


def _torch_cost(counts: dict[str, Any]) -> str:
    hold, windows = _num(counts, "torch_hold_max_ms"), _num(counts, "torch_traces")
    if hold is None or not windows:
        return " The in-target agent ran no torch window."
    total, profiled = _num(counts, "torch_hold_total_ms") or 0.0, _num(counts, "torch_window_s") or 0.0
    budget = _num(counts, "torch_hold_budget_ms")
    said = f" (budget {budget:.0f} ms per hold)" if budget else ""
    return (f" The agent's {windows:.0f} torch windows ({profiled:.2f} s profiled) held the target at most "
            f"{hold:.1f} ms at a time, {total:.0f} ms in all{said}.")


def _budget(m: dict[str, Any]) -> str:
    """The overhead budget and what it gave up (diagnose/capture/budget.py)."""
    raw = m.get("budget")
    b: dict[str, Any] = raw if isinstance(raw, dict) else {}
    pct = _num(b, "pct_of_core")
    if pct is None:
        return ""
    asked: dict[str, Any] = b["asked"] if isinstance(b.get("asked"), dict) else {}
    final: dict[str, Any] = b["final"] if isinstance(b.get("final"), dict) else {}
    raw_changes = b.get("changes")
    changes = [c for c in raw_changes if isinstance(c, dict)] if isinstance(raw_changes, list) else []
    peak = _num(b, "used_pct_of_core_max")
    said = f" Overhead budget {pct:g}% of one core" + (f" (peak {peak:.0f}% in a 2 s period)" if peak else "")
    gave = [f"py-spy at {text(final.get('pyspy_hz'))} Hz instead of {text(asked.get('pyspy_hz'))}"
            if final.get("pyspy_hz") != asked.get("pyspy_hz") else "",
            f"process readings at {text(final.get('process_hz'))} Hz instead of {text(asked.get('process_hz'))}"
            if final.get("process_hz") != asked.get("process_hz") else ""]
    gave = [g for g in gave if g]
    if not changes:
        return said + ": nothing was lowered."
    why = text(changes[0].get("why", ""))
    return said + ": " + ("; ".join(gave) if gave else "rates lowered, then raised back") + f" (first change: {why})."


def cost_line(report: Report) -> str:
    """One sentence: diagnose's CPU as a share of a core and of the host, its children's, its peak
    memory, and how long the agent's torch windows held the target."""
    m = report.manifest
    cost = m.get("cost") if isinstance(m.get("cost"), dict) else None
    if cost is None:
        why = "imported files" if m.get("end_reason") == "imported" else "a bundle without the record"
        return f"**Cost of this capture**: not recorded ({why})."
    wall, own, kids = _num(cost, "wall_s"), _num(cost, "diagnose_cpu_s"), _num(cost, "children_cpu_s")
    cpus = _num(cost, "host_cpus")
    if not wall or own is None:
        return "**Cost of this capture**: not recorded (incomplete record)."
    host = f", {100 * own / wall / cpus:.1f}% of the host's {cpus:.0f} CPUs" if cpus and cpus >= 1 else ""
    parts = [f"diagnose used {own:.2f} s of CPU in {wall:.1f} s ({100 * own / wall:.1f}% of one core{host})"]
    if kids is not None:
        parts.append(f"its child processes (py-spy; the live view's analyses) {kids:.2f} s "
                     f"({100 * kids / wall:.1f}% of one core)")
    rss = _num(cost, "max_rss_bytes")
    if rss:
        parts.append(f"peak memory {fmt_value(rss, 'bytes')}")
    tail = _budget(m) + _agent_cost(m) + _priority(cost)
    return "**Cost of this capture**: " + "; ".join(parts) + "." + tail


def _priority(cost: dict[str, Any]) -> str:
    """At which CPU priority the collectors ran (collectors/priority.py), when the record says."""
    raw = cost.get("collector_priority")
    if not isinstance(raw, dict) or not raw:
        return ""
    got = sorted({str(v) for v in raw.values()})
    lowest = all(g == "nice 19" for g in got)
    return (f" Collectors and py-spy ran at {text(', '.join(got))}" + (
        ": the target's threads had the cores first (on a saturated host py-spy waits its turn, hence "
        "the window gaps)." if lowest else "."))


__all__ = ["cost_line", "environment_bits"]

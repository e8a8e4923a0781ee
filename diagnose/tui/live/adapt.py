"""Partial Analysis + live series -> LiveVM, and capture progress -> LiveHeaderVM. Pure.

Panels are data-driven: the GPU panel shows whatever GPU counters the analysis holds (adapt_gpu),
per GPU when signals/gpu.py lists the devices, and the service panel whatever ``spans.*`` /
``llm.*`` signals exist; otherwise each says "not captured" with the collector's own reason.
"""
from __future__ import annotations

import os
from typing import Any

from diagnose.model import Analysis, Signal
from diagnose.tui.live.adapt_gpu import GPU_COLLECTORS, GPU_METRICS, first_reason, gpu_panel
from diagnose.tui.live.series import CpuSnapshot
from diagnose.tui.results.adapt import verdict_vm
from diagnose.tui.text import fmt_value, spark, split_family
from diagnose.tui.viewmodels import CollectorChip, LiveHeaderVM, LiveVM, MetricLine, PanelVM

SPARK_WIDTH = 16
SERVICE_METRICS = (("QPS", "spans.qps"), ("P50", "spans.p50_ms"), ("P99", "spans.p99_ms"),
                   ("TTFT P50", "llm.ttft_p50_ms"), ("TPOT P50", "llm.tpot_p50_ms"),
                   ("tokens/s", "llm.output_tokens_per_s"))
SPAN_COLLECTORS = ("agent", "otlp")


def header_view(target: dict[str, Any], elapsed_s: float, remaining_s: float,
                counts: dict[str, dict], states: dict[str, str], status: str = "capturing") -> LiveHeaderVM:
    cmd = " ".join(target.get("cmdline") or []) or target.get("name") or "?"
    chips = tuple(
        CollectorChip(name, state, ", ".join(f"{k} {v}" for k, v in counts.get(name, {}).items()))
        for name, state in states.items())
    return LiveHeaderVM(f"pid {target.get('pid', '?')} · {cmd}", python_label(target), elapsed_s,
                        remaining_s, chips, status)


def python_label(target: dict[str, Any]) -> str:
    """The target's Python: its recorded version when an agent reported one, else the exe name."""
    if target.get("python"):
        return f"Python {target['python']}"
    exe = os.path.basename(str(target.get("exe") or ""))
    return exe or "Python ?"


def cpu_panel(cpu: CpuSnapshot, a: Analysis | None) -> PanelVM:
    lines: list[MetricLine] = []
    last = cpu.process_pct[-1] if cpu.process_pct else None
    hi = max(100.0, 100.0 * -(-max(cpu.process_pct, default=0.0) // 100))
    lines.append(MetricLine("process", fmt_value(last, "%"), spark(cpu.process_pct, SPARK_WIDTH, hi)))
    if cpu.busiest_pct is not None:
        name = f" {cpu.busiest_name}" if cpu.busiest_name else ""
        lines.append(MetricLine("busiest thread", f"{cpu.busiest_pct:.0f}% tid {cpu.busiest_tid}{name}"))
    host = cpu.host_pct[-1] if cpu.host_pct else None
    lines.append(MetricLine(f"host ({cpu.ncpu} CPUs)", fmt_value(host, "%"), spark(cpu.host_pct, SPARK_WIDTH)))
    if a is not None:
        lines += _top_categories(a.signals)
        lines += [MetricLine("top frame", f"{s.share_pct:.0f}% {s.frames[-1]}")
                  for s in a.top_stacks[:2] if s.frames]
    note = "" if cpu.records else "waiting for the process collector's first readings"
    return PanelVM("CPU", tuple(lines), note)


def _top_categories(signals: dict[str, Signal], n: int = 2) -> list[MetricLine]:
    cats = [(split_family(s.name)[1], s.value) for s in signals.values()
            if s.name.startswith("cpu.category_share_pct[") and s.value]
    return [MetricLine("category", f"{val:.0f}% {cat}")
            for cat, val in sorted(cats, key=lambda kv: -kv[1])[:n]]


def gpu_view(a: Analysis | None, manifest: dict[str, Any], history: dict[str, tuple[float, ...]]) -> PanelVM:
    signals = a.signals if a is not None else {}
    reason = first_reason(signals, tuple(base for _, base in GPU_METRICS),
                          collectors_reason(manifest, GPU_COLLECTORS, "GPU"))
    return gpu_panel(a, reason, history)


def _metric(label: str, s: Signal) -> MetricLine:
    return MetricLine(label, fmt_value(s.value, s.unit) if s.known else f"unknown: {s.reason}")


def service_panel(a: Analysis | None, manifest: dict[str, Any]) -> PanelVM:
    signals = a.signals if a is not None else {}
    if not any(s.known for n, s in signals.items() if n.startswith(("spans.", "llm."))):
        fallback = (collectors_reason(manifest, SPAN_COLLECTORS, "span")
                    + "; start the service under `diagnose run` or send OTLP spans")
        return PanelVM("Service", (), "no spans yet: " + first_reason(
            signals, tuple(name for _, name in SERVICE_METRICS), fallback))
    lines = [_metric(label, signals[name]) for label, name in SERVICE_METRICS
             if name in signals and (signals[name].known or name.startswith("spans."))]
    stages = [s for s in signals.values() if s.name.startswith("spans.stage_share_pct[") and s.value]
    for s in sorted(stages, key=lambda s: -(s.value or 0.0))[:3]:
        lines.append(MetricLine(f"stage {split_family(s.name)[1]}", fmt_value(s.value, s.unit)))
    return PanelVM("Service", tuple(lines))


def collectors_reason(manifest: dict[str, Any], names: tuple[str, ...], what: str) -> str:
    """The state and reason of the first of ``names`` in the manifest, or that none ran."""
    for c in manifest.get("collectors", []):
        if c.get("name") in names:
            reason = f": {c['reason']}" if c.get("reason") else ""
            return f"{c['name']} {c.get('state')}{reason}"
    return f"no {what} collector in this capture ({', '.join(names)})"


def live_view(a: Analysis | None, manifest: dict[str, Any], cpu: CpuSnapshot,
              history: dict[str, tuple[float, ...]], analysed_s: float | None,
              error: str | None = None) -> LiveVM:
    """``analysed_s``: seconds of capture the analysis covers; ``error``: why it failed, if it did."""
    if error:
        note = f"provisional verdict unavailable: {error}"
    elif a is None or analysed_s is None:
        note = "provisional verdict: waiting for the first analysis"
    else:
        note = f"provisional, from the first {analysed_s:.0f} s of data"
    return LiveVM(cpu_panel(cpu, a), gpu_view(a, manifest, history), service_panel(a, manifest),
                  verdict_vm(a.verdict, provisional=True) if a is not None else None, note)

"""GPU counters -> the live GPU panel. Pure.

Two sources, both from signals/gpu.py: the ``gpu.*`` signals (time-weighted over the capture,
for the target's GPUs together) and ``details["gpu_devices"]`` (one row per GPU: ``gpu`` index,
``name``, ``target``, ``values`` keyed by signal name). Sparklines are per-interval means derived
from the running averages (series.SignalHistory, 1 s buckets), keyed ``<signal>`` or ``<signal>#<gpu index>``.
"""
from __future__ import annotations

from dataclasses import dataclass

from diagnose.model import Analysis, Signal
from diagnose.results.details import GpuDevice
from diagnose.tui.live.series import Buckets
from diagnose.tui.text import fmt_value, split_family
from diagnose.tui.viewmodels import MetricLine, PanelVM, Trend

# In the order the method reads them (DESIGN.md): SM activity vs DRAM activity separates compute
# from bandwidth; kernel busy is NVML's "GPU-Util" (a kernel was running, not how busy the SMs were).
GPU_METRICS = (("SM active", "gpu.sm_active_pct"), ("DRAM active", "gpu.dram_active_pct"),
               ("tensor", "gpu.tensor_active_pct"), ("kernel busy", "gpu.kernel_busy_pct"),
               ("power", "gpu.power_pct_of_limit"))
GPU_COLLECTORS = ("nvml", "gpm", "dcgm")


@dataclass(frozen=True)
class GpuGroup:
    """The panel's values for one GPU (``key`` "#<index>") or the target's GPUs together ("")."""

    title: str
    key: str
    values: dict[str, float | None]
    units: dict[str, str]
    reasons: dict[str, str]


def _power_name(signals: dict[str, Signal]) -> str:
    """``gpu.power_pct_of_limit``, else the first other ``gpu.power*`` signal a source provides."""
    if GPU_METRICS[-1][1] in signals:
        return GPU_METRICS[-1][1]
    return next((n for n in sorted(signals) if n.startswith("gpu.power")), GPU_METRICS[-1][1])


def gpu_groups(a: Analysis | None) -> list[GpuGroup]:
    if a is None:
        return []
    names = [base for _, base in GPU_METRICS[:-1]] + [_power_name(a.signals)]
    units = {n: a.signals[n].unit if n in a.signals else "%" for n in names}
    agg = GpuGroup("target GPUs", "", {n: a.signals[n].value if n in a.signals else None for n in names},
                   units, {n: a.signals[n].reason or "" for n in names if n in a.signals})
    groups = [GpuGroup(_device_title(d), f"#{d.gpu}", {n: d.values.get(n) for n in names}, units, {})
              for d in a.details.gpu_devices]
    return groups if len(groups) == 1 else [agg, *groups]


def _device_title(d: GpuDevice) -> str:
    title = f"GPU {d.gpu}" + (f" {d.name}" if d.name else "")
    return title + (" (target)" if d.target else "")


def gpu_history_values(a: Analysis) -> dict[str, float]:
    """The running averages to feed SignalHistory, one per GPU metric and group."""
    return {name + g.key: v for g in gpu_groups(a) for name, v in g.values.items() if v is not None}


def trend(series: Buckets | None, unit: str, hi: float | None = None) -> Trend | None:
    """The sparkline of ``series`` on 0..``hi``; by default 0..100 for a percentage, else 0..its
    maximum."""
    if series is None or not series.values:
        return None
    top = hi if hi is not None else 100.0 if unit == "%" else (max(series.values) or 1.0)
    return Trend(series.values, series.weights_s, top, series.bucket_s)


def gpu_panel(a: Analysis | None, reason: str, history: dict[str, Buckets]) -> PanelVM:
    """``reason``: what to say when no GPU metric is known (the collectors' own reason)."""
    groups = [g for g in gpu_groups(a) if any(v is not None for v in g.values.values())]
    if not groups:
        return PanelVM("GPU", (), "not captured: " + reason)
    lines: list[MetricLine] = []
    for g in groups:
        if len(groups) > 1 or g.key:
            lines.append(MetricLine(g.title, "", kind="heading"))
        for (label, _), name in zip(GPU_METRICS, g.values):
            value = g.values[name]
            unit = g.units.get(name, "%")
            if value is None:
                lines.append(MetricLine(label, "unknown"))
                continue
            lines.append(MetricLine(label, fmt_value(value, unit), trend(history.get(name + g.key), unit)))
    return PanelVM("GPU", tuple(lines))


def first_reason(signals: dict[str, Signal], names: tuple[str, ...], fallback: str) -> str:
    """The reason the analysis gives for the first of ``names`` (a family, or with ``[key]``)."""
    for name in names:
        for n, s in sorted(signals.items()):
            if split_family(n)[0] == name and s.reason:
                return s.reason
    return fallback

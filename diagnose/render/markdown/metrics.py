"""The report's key metrics: latency percentiles, QPS, in-flight, TTFT/TPOT, GPU and CPU, each
with its source. Pure: reads the Analysis; only what was measured appears."""
from __future__ import annotations

from typing import Any

from diagnose.model import Analysis
from diagnose.render.markdown.serving import serving_rows
from diagnose.render.units import fmt_value

# (label, signal) rows read straight from the signals, in the order an engineer scans them.
SIGNAL_ROWS = (
    ("QPS", "spans.qps"),
    ("in-flight requests (spans, measured)", "spans.in_flight_mean"),
    ("in-flight requests (Little's law: QPS x mean latency)", "spans.in_flight_littles_law"),
    ("in-flight connections (TCP, from outside)", "tcp.in_flight_mean"),
    ("output tokens/s", "llm.output_tokens_per_s"),
    ("GPU SM activity", "gpu.sm_active_pct"),
    ("GPU DRAM activity", "gpu.dram_active_pct"),
    ("GPU-Util (NVML: a kernel was resident)", "gpu.kernel_busy_pct"),
    ("process CPU (100% = one core)", "cpu.process_util_pct"),
    ("host CPU busy", "sys.cpu_util_pct"),
    ("waiting for a core (share of CPU demand)", "cpu.runqueue_wait_pct"),
)


def key_metrics(a: Analysis) -> list[list[Any]]:
    rows: list[list[Any]] = []
    req = a.details.requests
    lat = req.latency if req is not None else None
    if req is not None and req.requests and lat is not None and lat.p50_ms is not None:
        rows.append(["latency P50 / P90 / P99 / P999",
                     " / ".join(f"{v or 0.0:.1f}" for v in (lat.p50_ms, lat.p90_ms, lat.p99_ms, lat.p999_ms)) + " ms",
                     f"stage spans, {req.requests} requests"])
    llm = a.details.llm
    for name, d in (("ttft", llm.ttft), ("tpot", llm.tpot)) if llm is not None else ():
        if d.count:
            rows.append([f"{name.upper()} P50 / P99", f"{d.p50_ms or 0.0:.2f} / {d.p99_ms or 0.0:.2f} ms",
                         f"gen_ai span attributes, {d.count} requests"])
    idle = a.signals.get("gpu.idle_pct")
    if idle is not None and idle.value is not None:
        rows.append(["GPU kernel busy (kernel timeline)", fmt_value(100.0 - idle.value, "%"), idle.source])
    for label, name in SIGNAL_ROWS:
        s = a.signals.get(name)
        if s is not None and s.value is not None:
            rows.append([label, fmt_value(s.value, s.unit), s.source])
    return rows + serving_rows(a.details)


__all__ = ["key_metrics"]

"""What a comparison needs beyond the analysis' single values: the raw request latencies and the
sampled levels over time, read from the report's bundle (streams of diagnose/bundle/streams.py).

``Samples.latency_ms``: request (root span) latencies, ms, in end order; ``end_s``: their end
times, s from the window start. ``series``: per name of SERIES, (t_ns, value) points on the Unix
clock: process CPU % of one core between consecutive process readings (psutil cpu_times), TCP
in-flight connections (process collector), GPU SM / DRAM activity % (GPM SM_UTIL / DRAM_BW_UTIL,
mean over GPUs per reading time), NVML GPU-Util %.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from diagnose.bundle.counters import process_cpu_s
from diagnose.bundle.streams import PROCESS, SPANS
from diagnose.model import Report
from diagnose.signals.gpu_series import read_gpm, read_nvml
from diagnose.signals.spans.analytics import parse_spans

Points = list[tuple[int, float]]
SERIES = ("process_cpu_pct", "tcp_in_flight", "gpu_sm_pct", "gpu_dram_pct", "gpu_util_pct")


@dataclass(frozen=True)
class Samples:
    window_ns: tuple[int, int] | None
    latency_ms: np.ndarray
    end_s: np.ndarray
    series: dict[str, Points] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        return (self.window_ns[1] - self.window_ns[0]) / 1e9 if self.window_ns else None


def _window(report: Report, ends: np.ndarray, starts: np.ndarray) -> tuple[int, int] | None:
    info = report.bundle.info
    if info.window_ns is not None and info.end_reason != "imported":
        return info.window_ns
    return (int(starts.min()), int(ends.max())) if len(ends) else None


def _process_series(report: Report) -> dict[str, Points]:
    recs = report.bundle.typed(PROCESS)
    cpu: Points = []
    for a, b in zip(recs, recs[1:]):
        dt = (b.t_ns - a.t_ns) / 1e9
        ncpu = b.ncpu or 1024
        cpu_a, cpu_b = process_cpu_s(a), process_cpu_s(b)
        if cpu_a is None or cpu_b is None:
            continue
        pct = 100.0 * (cpu_b - cpu_a) / dt if dt > 0 else -1.0
        if 0.0 <= pct <= 110.0 * ncpu:  # a counter that went back, or past every core: not a reading
            cpu.append((b.t_ns, pct))
    tcp = [(r.t_ns, float(n)) for r in recs if (n := r.accepted) is not None]
    return {"process_cpu_pct": cpu, "tcp_in_flight": tcp}


def _mean_by_time(points: Points) -> Points:
    by_t: dict[int, list[float]] = {}
    for t, v in points:
        by_t.setdefault(t, []).append(v)
    return sorted((t, sum(vs) / len(vs)) for t, vs in by_t.items())


def _gpu_series(report: Report) -> dict[str, Points]:
    gpm = read_gpm(report.bundle)
    out: dict[str, Points] = {}
    for name, key in (("gpu_sm_pct", "sm_util_pct"), ("gpu_dram_pct", "dram_bw_util_pct")):
        pts = [(r.t_ns, r.metrics[key]) for rows in gpm.readings.values() for r in rows
               if key in r.metrics and 0.0 <= r.metrics[key] <= 100.0]
        out[name] = _mean_by_time(pts)
    nv = read_nvml(report.bundle)
    util = [(r.t_ns, float(r.values["gpu_util_pct"])) for rows in nv.readings.values() for r in rows
            if "gpu_util_pct" in r.values and 0 <= r.values["gpu_util_pct"] <= 100]
    out["gpu_util_pct"] = _mean_by_time(util)
    return out


def samples_of(report: Report) -> Samples:
    """The report's request latencies and sampled series (see the module docstring)."""
    reqs = parse_spans(report.bundle.typed(SPANS)).requests
    starts = np.array([r.span.start_ns for r in reqs], np.int64)
    ends = np.array([r.span.end_ns for r in reqs], np.int64)
    window = _window(report, ends, starts)
    if window is not None and len(ends):  # requests that ended inside the window, as the QPS counts them
        inside = (ends >= window[0]) & (ends <= window[1])
        starts, ends = starts[inside], ends[inside]
    order = np.argsort(ends, kind="stable")
    lat = (ends - starts)[order] / 1e6
    end_s = (ends[order] - window[0]) / 1e9 if window else np.zeros(0)
    return Samples(window, lat.astype(float), end_s.astype(float), {**_process_series(report), **_gpu_series(report)})


__all__ = ["SERIES", "Points", "Samples", "samples_of"]

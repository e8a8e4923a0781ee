"""The demo's closing line: the load generator's client-side latency beside diagnose's span-side one."""
from __future__ import annotations

from typing import Any

from diagnose.demo.runner import DemoRun


def _ms(v: Any) -> str:
    return f"{v:.1f} ms" if isinstance(v, (int, float)) else "n/a"


def _calibration(run: DemoRun) -> str:
    if run.capacity_qps is None or run.load_factor is None:
        return ""
    return f" ({run.load_factor:.3g} x the {run.capacity_qps:.1f} QPS capacity measured before the capture)"


def load_line(run: DemoRun, report: Any | None, analysis_cpu_s: float | None = None) -> str:
    """One line: offered QPS (and the capacity it came from), achieved QPS and client P50/P99 (from
    scheduled arrival, so queueing in the client counts), then diagnose's request-span P50/P99, how
    long the children took to stop, and the CPU time of the analysis after the capture
    (benchmarks/accuracy.py reads it)."""
    st = run.load_stats()
    if st is None:
        client = "load generator: no stats"
    else:
        client = (f"load generator: offered {st.get('offered_qps')} QPS{_calibration(run)}, "
                  f"achieved {st.get('achieved_qps')} QPS, "
                  f"{st.get('requests')} requests ({st.get('errors')} errors, {st.get('unfinished')} unfinished), "
                  f"client P50 {_ms(st.get('p50_ms'))} / P99 {_ms(st.get('p99_ms'))}")
    req = report.analysis.details.requests if report is not None else None
    lat = req.latency if req is not None else None
    spans = (f"diagnose (request spans): P50 {_ms(lat.p50_ms if lat else None)} / "
             f"P99 {_ms(lat.p99_ms if lat else None)}")
    stopped = f"children stopped in {run.stopped_in_s:.2f} s" if run.stopped_in_s is not None else ""
    analysis = f"analysis {analysis_cpu_s:.2f} s of CPU" if analysis_cpu_s is not None else ""
    return "; ".join(x for x in (client, spans, stopped, analysis) if x)


__all__ = ["load_line"]

"""Markdown sections for the kernel timeline, GPU idle gaps, request latency and the join.

Reads ``analysis.details`` (diagnose/results/details.py) written by the timeline signal source
(signals/timeline.py); each
function returns Markdown lines, empty when the bundle has no such data.
"""
from __future__ import annotations

from typing import Any

from diagnose.render.markdown.gfm import Safe, cell, code, join, text
from diagnose.render.units import fmt_us, utc_clock_ms
from diagnose.results.details import Details
from diagnose.results.traces import TraceView, trace_views
from diagnose.rules.base import TRAINING

MAX_GAP_ROWS = 10


def _num(v: Any, fmt: str = ".1f", unit: str = "") -> str:
    return "unknown" if v is None else f"{v:{fmt}}{unit}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows] + [""])


def _join_lines(d: Details) -> list[str]:
    out = []
    for j in (d.join.gaps, d.join.slow):
        if j and j.headline:
            out.append(f"> {text(j.headline)}")
            out.append("")
            threads = [t for t in j.threads if t.busy_pct > 0][:3]
            if threads:
                out += _table(["thread", "busy % of samples", "top categories", "top functions"], [
                    [t.thread, _num(t.busy_pct, ".0f", "%"),
                     ", ".join(f"{c.name} {c.share_pct:.0f}%" for c in t.categories[:3]),
                     join([Safe(f"{code(f.name)} {f.share_pct:.0f}%") for f in t.functions[:2]])]
                    for t in threads])
    return out


def _trace_lines(t: TraceView) -> list[str]:
    who = f"rank {t.rank}" if t.rank is not None else "rank ?"
    dev = text(", ".join(t.devices) or "no GPU in deviceProperties")
    out = [f"### {who} · {dev} · {code(t.path.rsplit('/', 1)[-1])}", ""]
    if t.read.error:
        out += [f"**Read problem:** {text(t.read.error)}"
                + (f" (at byte {t.read.truncated_at_byte}; events before it were kept)"
                   if t.read.truncated_at_byte is not None else ""), ""]
    tb = t.temporal
    if not tb:
        return out + ["No GPU activity recorded in this trace (no kernels, memcpy or memset).", ""]
    hta = t.temporal_hta_rounding
    out += _table(["", "idle", "compute", "non-compute", "window"], [
        ["exact (ns)", _num(tb.idle_pct, ".2f", "%"), _num(tb.compute_pct, ".2f", "%"),
         _num(tb.non_compute_pct, ".2f", "%"), f"{tb.span_ns / 1e6:.1f} ms"],
        ["HTA rounding (µs)", _num(hta and hta.idle_pct, ".2f", "%"), _num(hta and hta.compute_pct, ".2f", "%"),
         _num(hta and hta.non_compute_pct, ".2f", "%"), f"{(hta.span_ns if hta else 0) / 1e6:.1f} ms"]])
    out += _table(["device", "stream", "idle", "host wait", "kernel wait", "other"], [
        [s.device, s.stream, f"{s.idle_ns / 1e6:.2f} ms", _num(s.host_wait_pct, ".0f", "%"),
         _num(s.kernel_wait_pct, ".0f", "%"), _num(s.other_pct, ".0f", "%")] for s in t.idle_by_stream])
    cats = t.kernel_categories.categories[:6]
    if cats:
        out += ["Kernel time by category: " + ", ".join(
            f"{c.category} {_num(c.share_pct, '.0f', '%')}" for c in cats) + ".", ""]
    la = t.launches
    out += [f"Launches: {la.kernels} kernels, {_num(la.short_kernel_pct, '.0f', '%')} shorter than "
            f"{la.short_kernel_threshold_us:g} µs; launch delay (host call to kernel start: the depth of "
            f"the queue ahead of it) P50 {fmt_us(la.launch_delay.p50_us)}, "
            f"P99 {fmt_us(la.launch_delay.p99_us)}. Host blocked in syncs: "
            f"{_num(t.syncs.host_blocked_pct, '.1f', '%')}.", ""]
    co = t.comm_overlap
    if co and co.comm_ns:
        exposed = 100.0 * co.exposed_ns / tb.span_ns if tb.span_ns else None
        out += [f"Collectives (kernel window; like HTA, kernels launched in the last ProfilerStep are left out): "
                f"{co.comm_ns / 1e6:.1f} ms, {_num(co.overlap_pct, '.1f', '%')} of it overlapped with compute "
                f"kernels (HTA comm/comp overlap); {co.exposed_ns / 1e6:.1f} ms exposed, "
                f"{_num(exposed, '.1f', '%')} of the window.", ""]
    if (t.training_ops_pct or 0.0) >= TRAINING.threshold:
        out += [f"Training loop: backward and optimizer ops hold {t.training_ops_pct:.1f}% of the host "
                "time, so remedies are worded for training.", ""]
    return out


def _gap_rows(t: TraceView) -> list[str]:
    if not t.gaps or t.idle_gaps is None:
        return []
    ig = t.idle_gaps
    what = "GPU idle gaps" if ig.of == "gpu" else "Gaps with no torch op (CPU-only trace)"
    out = [f"{what} >= {ig.min_gap_us:g} µs: {ig.count}, {_num(ig.share_pct, '.0f', '%')} of the window. "
           "Longest:", ""]
    return out + _table(["start (UTC)", "length", "host op open in the trace", "busiest thread (py-spy)"], [
        [utc_clock_ms(g.start_ns), fmt_us(g.dur_us),
         code(g.host_op) if g.host_op else "none (Python between ops)", g.pyspy or "no samples"]
        for g in sorted(t.gaps, key=lambda g: -g.dur_us)[:MAX_GAP_ROWS]])


def timeline_section(details: Details) -> list[str]:
    traces = details.torch_traces
    join_lines = _join_lines(details)
    if not traces and not join_lines:
        return []
    out = ["## GPU idle gaps and kernel timeline", ""] + join_lines
    for t in trace_views(traces):
        out += _trace_lines(t) + _gap_rows(t)
    return out


def latency_section(details: Details) -> list[str]:
    r = details.requests
    if r is None or not r.requests or r.latency is None:
        return []
    lat = r.latency
    out = ["## Request latency and stages", "",
           f"{r.requests} requests in {r.window_s or 0.0:.1f} s: {_num(r.qps, '.1f')} QPS; in flight "
           f"{_num(r.in_flight_measured_mean, '.2f')} measured vs {_num(r.in_flight_littles_law, '.2f')} "
           f"by Little's law (QPS x mean latency); {r.errors} errors.", ""]
    out += _table(["P50", "P90", "P95", "P99", "P999", "max"],
                  [[f"{_num(v)} ms" for v in (lat.p50_ms, lat.p90_ms, lat.p95_ms, lat.p99_ms, lat.p999_ms,
                                              lat.max_ms)]])
    stages = {k: v for k, v in r.stage_share_pct.items() if v}
    if stages:
        out += ["Share of request time per stage: " + ", ".join(
            f"{k} {v:.0f}%" for k, v in sorted(stages.items(), key=lambda kv: -kv[1]))
            + f"; not in any stage span {_num(r.unstaged_pct, '.0f', '%')}.", ""]
    tail = details.tail
    if tail is not None and tail.requests:
        bits = [f"Slowest 1% ({tail.requests} requests >= {_num(tail.cut_ms)} ms)"]
        if tail.dominant_stage:
            st = tail.dominant_stage
            bits.append(f"spend {tail.stage_share_pct[st]:.0f}% in `{st}` (all requests: "
                        f"{tail.all_stage_share_pct[st]:.0f}%)")
        if tail.size_attribute:
            sa = tail.size_attribute
            bits.append(f"have {sa.ratio:.1f}x the median {code(sa.attribute)}")
        if tail.gc_overlap_pct is not None:
            bits.append(f"{tail.gc_overlap_pct:.0f}% overlap a GC pause (all: {_num(tail.gc_overlap_all_pct, '.0f')}%)")
        out += ["; ".join(bits) + ".", ""]
    llm = details.llm
    if llm is not None and (llm.ttft.count or llm.tpot.count):
        out += [f"LLM: TTFT P50 {_num(llm.ttft.p50_ms)} ms / P99 {_num(llm.ttft.p99_ms)} ms; "
                f"TPOT P50 {_num(llm.tpot.p50_ms, '.2f')} ms / P99 {_num(llm.tpot.p99_ms, '.2f')} ms; "
                f"{_num(llm.output_tokens_per_s, '.1f')} output tokens/s.", ""]
    return out


__all__ = ["latency_section", "timeline_section"]

"""Partial Analysis + live series -> LiveVM, and capture progress -> LiveHeaderVM. Pure.

Panels are data-driven: the GPU panel shows whatever GPU counters the analysis holds (adapt_gpu),
per GPU when signals/gpu.py lists the devices, and the service panel whatever ``spans.*`` /
``llm.*`` signals exist; otherwise each says "not captured" with the collector's own reason.
Lists (threads, categories, frames, stages, account terms) show their first rows; the rest go
to ``PanelVM.more``, shown when a panel is opened full screen.
"""
from __future__ import annotations

import math
import os

from diagnose.bundle.records.manifest import ManifestInfo, TargetInfo
from diagnose.model import Analysis, Quadrant, Signal
from diagnose.render.account import account_rows_of
from diagnose.render.units import pid_text
from diagnose.tui.live.adapt_gpu import GPU_COLLECTORS, GPU_METRICS, first_reason, gpu_panel, trend
from diagnose.tui.live.engine import EngineSnapshot
from diagnose.tui.live.frames import FrameWindow, window_frames
from diagnose.tui.live.series import Buckets, CpuSnapshot, RequestSnapshot
from diagnose.tui.results.adapt import verdict_vm
from diagnose.tui.text import fmt_value, printable, split_family
from diagnose.tui.viewmodels import CollectorChip, LiveHeaderVM, LiveVM, MetricLine, PanelVM, Trend

SERVICE_METRICS = (("QPS", "spans.qps"), ("P50", "spans.p50_ms"), ("P99", "spans.p99_ms"),
                   ("TTFT P50", "llm.ttft_p50_ms"), ("TPOT P50", "llm.tpot_p50_ms"),
                   ("tokens/s", "llm.output_tokens_per_s"))
LIVE_RECENT = 5  # seconds of the live request series behind the figures shown before an analysis
SPAN_COLLECTORS = ("agent", "otlp")
SHOWN = 3  # rows of each list on the dashboard; the rest in ``more``
MAX_ROWS = 12  # rows of each list in all


def header_view(target: TargetInfo, elapsed_s: float, remaining_s: float,
                counts: dict[str, dict], states: dict[str, str], status: str = "capturing") -> LiveHeaderVM:
    cmd = printable(" ".join(target.cmdline) or target.name or "?")
    chips = tuple(
        CollectorChip(name, state, printable(", ".join(f"{k} {v}" for k, v in counts.get(name, {}).items())))
        for name, state in states.items())
    return LiveHeaderVM(f"pid {pid_text(target)} · {cmd}", python_label(target), elapsed_s,
                        remaining_s, chips, status)


def python_label(target: TargetInfo) -> str:
    """The target's Python: its recorded version when an agent reported one, else the exe name."""
    if target.python:
        return f"Python {target.python}"
    exe = os.path.basename(target.exe or "")
    return exe or "Python ?"


def _split(heading: str, items: list[MetricLine]) -> tuple[list[MetricLine], list[MetricLine]]:
    """A list under ``heading``: (the dashboard's rows, the rest for ``more``)."""
    if not items:
        return [], []
    items = items[:MAX_ROWS]
    return [MetricLine(heading, "", kind="heading"), *items[:SHOWN]], items[SHOWN:]


def cpu_panel(cpu: CpuSnapshot, a: Analysis | None, frames: FrameWindow | None = None) -> PanelVM:
    """Process and host CPU % over time, the busiest threads over the last window, the CPU
    categories and the top frames (of the newest py-spy samples when ``frames`` says so)."""
    lines: list[MetricLine] = []
    more: list[MetricLine] = []
    last = cpu.process_pct[-1] if cpu.process_pct else None
    hi = max(100.0, 100.0 * -(-max(cpu.process_pct, default=0.0) // 100))
    lines.append(MetricLine("process", fmt_value(last, "%"), trend(cpu.process, "%", hi)))
    host = cpu.host_pct[-1] if cpu.host_pct else None
    lines.append(MetricLine(f"host ({cpu.ncpu} CPUs)", fmt_value(host, "%"), trend(cpu.host, "%")))
    threads = [MetricLine(printable(f"{t.tid} {t.name}".strip()), f"{t.pct:.0f}%", kind="item") for t in cpu.threads
               if t.pct >= 0.5]
    sections = [(f"threads, last {cpu.thread_window_s:.0f} s (% of one core)", threads)]
    if a is not None:
        sections.append(("categories, capture so far", _categories(a.signals)))
        if frames is None:
            frames = window_frames((), a.top_stacks)
        if frames is not None:
            when = "newest samples" if frames.newest else "capture so far"
            sections.append((f"top frames, {when}", [
                MetricLine(printable(f"{r.frame} · {r.category}"), f"{r.pct:.0f}%", kind="item")
                for r in frames.rows]))
    for heading, items in sections:
        shown, rest = _split(heading, items)
        lines += shown
        more += ([MetricLine(heading + " (more)", "", kind="heading")] if rest else []) + rest
    note = "" if cpu.records else "waiting for the process collector's first readings"
    return PanelVM("CPU", tuple(lines), note, tuple(more))


def _categories(signals: dict[str, Signal]) -> list[MetricLine]:
    cats = [(split_family(s.name)[1] or "?", s.value) for s in signals.values()
            if s.name.startswith("cpu.category_share_pct[") and s.value]
    return [MetricLine(cat, f"{val:.0f}%", kind="item") for cat, val in sorted(cats, key=lambda kv: -kv[1])]


def gpu_view(a: Analysis | None, manifest: ManifestInfo, history: dict[str, Buckets]) -> PanelVM:
    signals = a.signals if a is not None else {}
    reason = first_reason(signals, tuple(base for _, base in GPU_METRICS),
                          collectors_reason(manifest, GPU_COLLECTORS, "GPU"))
    return gpu_panel(a, reason, history)


def _metric(label: str, s: Signal, live: Trend | None) -> MetricLine:
    if not s.known:
        return MetricLine(label, f"unknown: {s.reason}")
    return MetricLine(label, fmt_value(s.value, s.unit), live)


def request_trends(requests: RequestSnapshot | None) -> dict[str, Trend]:
    """Request rate (mean per column) and P99 (the worst second's in each column) from the spans
    as they arrive, keyed by the signal they show over time."""
    if requests is None or not requests.requests:
        return {}
    qps, lat = requests.qps, requests.p99_ms
    return {"spans.qps": Trend(qps.values, qps.weights_s, max(qps.values) or 1.0, qps.bucket_s),
            "spans.p99_ms": Trend(lat.values, lat.weights_s, max(lat.values) or 1.0, lat.bucket_s, "max")}


def _live_lines(requests: RequestSnapshot, trends: dict[str, Trend]) -> list[MetricLine]:
    """Before the first analysis with spans: the live series' newest figures (last 5 s)."""
    recent = requests.qps.values[-LIVE_RECENT:]
    lat = [v for v, w in zip(requests.p99_ms.values[-LIVE_RECENT:], requests.p99_ms.weights_s[-LIVE_RECENT:]) if w]
    return [MetricLine("QPS", fmt_value(sum(recent) / len(recent), "1/s"), trends["spans.qps"]),
            MetricLine("P99", fmt_value(max(lat), "ms") if lat else "-", trends["spans.p99_ms"])]


def engine_lines(engine: EngineSnapshot) -> list[MetricLine]:
    """The serving engine's newest figures: running / waiting and KV-cache usage (newest scrape),
    TTFT P50 / P99 and the queue share (over the last scrapes); only what the engine exposes."""
    from diagnose.signals.serving import queue_share

    g, out = engine.latest.gauges, []
    if "running" in g or "waiting" in g:
        out.append(MetricLine("running / waiting", " / ".join(
            f"{g[k].mean:.0f}" if k in g else "-" for k in ("running", "waiting"))))
    if "kv_usage" in g:
        out.append(MetricLine("KV cache", f"{g['kv_usage'].mean:.0f}%"))
    ttft = engine.recent.histograms.get("ttft")
    if ttft is not None and ttft.count and ttft.p50_s is not None:
        p99 = f"{ttft.p99_s * 1e3:.0f}" if ttft.p99_s is not None else "-"
        out.append(MetricLine("TTFT P50 / P99", f"{ttft.p50_s * 1e3:.0f} / {p99} ms"))
    share = queue_share(engine.recent)
    if share is not None:
        out.append(MetricLine("queue share", f"{share[0]:.0f}%"))
    return out


def service_panel(a: Analysis | None, manifest: ManifestInfo,
                  requests: RequestSnapshot | None = None, engine: EngineSnapshot | None = None) -> PanelVM:
    """Request rate and P99 over time (``requests``: root spans as they arrive), the span/LLM
    figures of the capture so far, and the stages' shares of request time; with no span yet and
    ``engine`` scrapes (``--metrics``), the engine's newest figures (engine_lines)."""
    signals = a.signals if a is not None else {}
    trends = request_trends(requests)
    has_signals = any(s.known for n, s in signals.items() if n.startswith(("spans.", "llm.")))
    if not has_signals and requests is not None and trends:
        return PanelVM("Service", tuple(_live_lines(requests, trends)),
                       f"{requests.requests} requests so far; the figures of the capture follow its analysis")
    shown = engine_lines(engine) if engine is not None and not has_signals else []
    if shown and engine is not None:
        window = engine.recent.window_s
        return PanelVM("Service", tuple(shown), f"no spans yet: serving engine /metrics ({engine.scrapes} scrapes; "
                       f"TTFT and queue share over the last {window:.0f} s)")
    if not has_signals:
        fallback = (collectors_reason(manifest, SPAN_COLLECTORS, "span")
                    + "; start the service under `diagnose run` or send OTLP spans")
        return PanelVM("Service", (), "no spans yet: " + first_reason(
            signals, tuple(name for _, name in SERVICE_METRICS), fallback))
    lines = [_metric(label, signals[name], trends.get(name)) for label, name in SERVICE_METRICS
             if name in signals and (signals[name].known or name.startswith("spans."))]
    stages = sorted((s for s in signals.values() if s.name.startswith("spans.stage_share_pct[") and s.value),
                    key=lambda s: -(s.value or 0.0))
    shown, rest = _split("stages, share of request time", [
        MetricLine(split_family(s.name)[1] or "?", fmt_value(s.value, s.unit), kind="item") for s in stages])
    late = f"{requests.late} requests ended too late to plot" if requests is not None and requests.late else ""
    return PanelVM("Service", tuple(lines + shown), late, tuple(rest))


def account_panel(a: Analysis | None) -> PanelVM:
    """"Where the time went": the limiting account's terms (diagnose/render/account.py)."""
    title = "Where the time went"
    if a is None:
        return PanelVM(title, (), "waiting for the first analysis")
    if not a.accounts:
        return PanelVM(title, (), "no source in this capture accounts for time yet")
    acc = a.accounts[0]
    rows = [MetricLine(f"{r.term} · {r.quadrant}" + (f"/{r.layer}" if r.layer != "-" else ""),
                       f"{r.share_pct:.0f}%", kind="item") for r in account_rows_of(acc)]
    head = MetricLine(f"{acc.title}, {acc.total_s:.1f} {acc.unit}", "", kind="heading")
    return PanelVM(title, (head, *rows[:SHOWN + 1]), "", tuple(rows[SHOWN + 1:]))


def collectors_reason(manifest: ManifestInfo, names: tuple[str, ...], what: str) -> str:
    """The state and reason of the first of ``names`` in the manifest, or that none ran."""
    for c in manifest.collectors:
        if c.name in names:
            reason = f": {c.reason}" if c.reason else ""
            return f"{c.name} {c.state}{reason}"
    return f"no {what} collector in this capture ({', '.join(names)})"


def collecting_note(elapsed_s: float, first_verdict_s: float) -> str:
    """What the verdict box says before the first py-spy window (``first_verdict_s`` seconds) is in."""
    left = first_verdict_s - elapsed_s
    if left > 0:
        return f"collecting: first verdict in {math.ceil(left)} s"
    return "collecting: analysing the first samples…"


def live_view(a: Analysis | None, manifest: ManifestInfo, cpu: CpuSnapshot,
              history: dict[str, Buckets], analysed_s: float | None,
              error: str | None = None, *, elapsed_s: float | None = None,
              first_verdict_s: float = 0.0, frames: FrameWindow | None = None,
              requests: RequestSnapshot | None = None, engine: EngineSnapshot | None = None) -> LiveVM:
    """``analysed_s``: seconds of capture the analysis covers; ``error``: why it failed, if it did;
    ``elapsed_s``: seconds captured so far; ``first_verdict_s``: seconds of data the first verdict
    needs (the first py-spy window); ``requests``: the request series from the spans; ``engine``:
    the serving engine's newest scrapes (shown while no span has arrived). Until the
    analysis covers that much, an UNKNOWN verdict is
    shown as "collecting: first verdict in N s"."""
    verdict = verdict_vm(a.verdict, provisional=True) if a is not None else None
    too_early = (analysed_s or 0.0) < first_verdict_s and (a is None or a.verdict.quadrant == Quadrant.UNKNOWN)
    if error:
        note = f"provisional verdict unavailable: {error}"
    elif too_early and elapsed_s is not None:
        verdict, note = None, collecting_note(elapsed_s, first_verdict_s)
    elif a is None or analysed_s is None:
        note = "provisional verdict: waiting for the first analysis"
    else:
        note = f"provisional, from the first {analysed_s:.0f} s of data"
    return LiveVM(cpu_panel(cpu, a, frames), gpu_view(a, manifest, history),
                  service_panel(a, manifest, requests, engine), verdict, note, account_panel(a))

"""Timeline signal source: torch traces, spans, GC pauses and py-spy stacks on one clock.

Reads the TORCH index + TORCH_TRACES (kernel timeline), SPANS, GC and the py-spy windows
(diagnose/bundle/streams.py), runs the pure analyzers (diagnose/traces, signals/spans/, signals/join) and
returns gpu.*/kernels.*/torch.*, spans.*/llm.* and join.* signals plus JSON tables for renderers.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

from diagnose.bundle import Bundle
from diagnose.bundle.records.manifest import CollectorCounts
from diagnose.bundle.streams import GC, TORCH
from diagnose.catalogs.frames import ALL_CATEGORIES, PARKED
from diagnose.model import Signal, missing
from diagnose.ranks.fanout import Fanout, FanoutError, current
from diagnose.ranks.inputs import job_of
from diagnose.results.details import Details, TraceGroup, TraceGroups, scalar
from diagnose.results.joins import JoinDetail, Joins
from diagnose.results.quality import DataQuality, SpansQuality, TorchQuality
from diagnose.results.spans import LlmDetail, RequestsCoverage, RequestsDetail, TailDetail
from diagnose.signals.base import SourceResult, collector_reason
from diagnose.signals.cpu import AGENT_THREAD_PREFIX, load_timed_stacks
from diagnose.signals.join import TimedStack, busiest_in_each, headline, join
from diagnose.signals.kernel_timeline import trace_signals
from diagnose.signals.params import DEFAULT_PARAMS, AnalysisParams
from diagnose.signals.ranks import rank_signals
from diagnose.signals.spans.analytics import SpanSet, excluded, parsed_sample, request_summary
from diagnose.signals.spans.coverage import recording_window, span_coverage
from diagnose.signals.spans.llm import llm_summary
from diagnose.signals.spans.sampling import sample_of
from diagnose.signals.spans.source import NO_SPANS, llm_signals, request_signals
from diagnose.signals.spans.tail import tail_summary
from diagnose.signals.trace_groups import trace_groups, why_apart
from diagnose.signals.trace_tasks import (
    TraceOutcome,
    TraceTask,
    bundle_specs,
    device_peak,
    read_member_trace,
    run_trace_task,
    trace_files,
    trace_outcome,
    trace_tasks,
)
from diagnose.traces.report import TimelineOptions, TraceReport

NO_TRACE = ("no torch profiler trace in this bundle: run the service under `diagnose run` (agent) "
            "or pass a trace file to `diagnose analyze`")
SLOW_STEP_PCT = 90
T = TypeVar("T")


def _reports(bundle: Bundle, options: TimelineOptions) -> tuple[list[TraceReport], list[str]]:
    """Every trace of the bundle read and analysed, one task per trace, wherever the current
    fan-out runs them (diagnose/ranks/fanout.py: this process unless the caller chose a pool or a
    Dask cluster). Raises FanoutError (a worker died, the Dask scheduler is unusable, a worker
    cannot open the bundle, every task on a Dask cluster failed); a trace that cannot be read is
    an error line, as in this process."""
    tasks, spec_error = trace_tasks(bundle, options)
    fanout = current()
    if fanout.scheduler is None and fanout.local_workers(len(tasks)) <= 1:
        outcomes = [trace_outcome(t, bundle) for t in tasks]  # the open bundle: no reopening
    else:
        outcomes = fanout.map(run_trace_task, tasks)
        _check_fanout(fanout, tasks, outcomes)
    errors = [spec_error] if spec_error else []
    errors += [e for o in outcomes for e in o.errors]
    return [o.report for o in outcomes if o.report is not None], errors


def _check_fanout(fanout: Fanout, tasks: list[TraceTask], outcomes: list[TraceOutcome]) -> None:
    """Raise FanoutError when the outcomes say the fan-out, not the traces, failed: a worker could
    not open the bundle, or every task on a Dask cluster failed (an analysis of nothing)."""
    where = f"the Dask workers of {fanout.scheduler}" if fanout.scheduler else "a local pool worker"
    lost = next((o for o in outcomes if o.bundle_unreadable), None)
    if lost is not None:
        raise FanoutError(f"{where} cannot open the bundle at {tasks[0].bundle} ({lost.errors[0][:160]}); they "
                          "must read it at that same path (a shared file system) and import diagnose")
    if fanout.scheduler and tasks and all(o.report is None for o in outcomes):
        first = next((e for o in outcomes for e in o.errors), "no report")
        raise FanoutError(f"every one of the {len(tasks)} trace task(s) failed on {where} (first: {first[:160]}); "
                          f"check that they read {tasks[0].bundle} at that path, or drop --scheduler")


def _capture_window(bundle: Bundle) -> tuple[int, int] | None:
    return bundle.info.window_ns


def _gap_join(reports: list[TraceReport], stacks: list[TimedStack], ss: SpanSet) -> JoinDetail | None:
    if not reports:
        return None
    gpu = [r for r in reports if r.has_gpu]
    use = gpu or reports
    windows = [(int(a), int(b)) for r in use for a, b in zip(r.gaps.start_ns, r.gaps.end_ns)]
    j = join("gpu_gaps" if gpu else "torch_gaps", windows, stacks, ss.spans)
    for r in use:  # the listed (longest) gaps: what the busiest sampled thread ran in each
        rows = r.tables["gaps"]
        for row, who in zip(rows, busiest_in_each(stacks, [(g["start_ns"], g["end_ns"]) for g in rows])):
            row["pyspy"] = who
    span = sum(r.gaps.window_ns for r in use)
    share = 100.0 * sum(r.gaps.total_ns for r in use) / span if span else 0.0
    thr = use[0].gaps.min_gap_ns
    temporal = [r.temporal for r in gpu if r.temporal is not None]  # every trace with GPU events has one
    window_ns = sum(t.span_ns for t in temporal)
    if gpu and window_ns > 0:
        idle = 100.0 * sum(t.idle_ns for t in temporal) / window_ns
        lead = (f"GPU idle {idle:.0f}% of the kernel window ({share:.0f}% in {len(windows)} gaps "
                f">= {thr / 1e3:g} us)")
    elif gpu:
        lead = "The GPU events span 0 ns"
    else:
        lead = (f"No GPU activity recorded; no torch op ran for {share:.0f}% of the profiled window "
                f"({len(windows)} gaps >= {thr / 1e6:g} ms)")
    return msgspec.structs.replace(j, headline=headline(j, lead))


def _slow_join(reports: list[TraceReport], tail: TailDetail, windows: list[tuple[int, int]],
               stacks: list[TimedStack], ss: SpanSet) -> JoinDetail | None:
    """The slowest 1% of requests (their ``windows``), else the slowest steps (>= P90) of the torch trace."""
    if tail.requests:
        j = join("slow_requests", windows, stacks, ss.spans)
        stage = tail.dominant_stage
        what = "request" if tail.requests == 1 else f"{tail.requests} requests"
        lead = f"The slowest {what} (>= {tail.cut_ms or 0.0:.1f} ms)"
        if stage:
            lead += f" spent {tail.stage_share_pct[stage]:.0f}% in stage `{stage}`"
        return msgspec.structs.replace(j, headline=headline(j, lead))
    steps = [s for r in reports for s in r.tables["steps"]["steps"]]
    if not steps:
        return None
    cut = float(np.percentile([s["dur_ms"] for s in steps], SLOW_STEP_PCT))
    slow = [s for s in steps if s["dur_ms"] >= cut]
    windows = [(s["start_ns"], s["start_ns"] + int(s["dur_ms"] * 1e6)) for s in slow]
    j = join("slow_steps", windows, stacks, ss.spans)
    what = "step" if len(slow) == 1 else f"{len(slow)} steps"
    return msgspec.structs.replace(j, headline=headline(j, f"The slowest {what} (>= {cut:.1f} ms)"))


def join_signals(prefix: str, j: JoinDetail | None, reason: str, pyspy_reason: str) -> dict[str, Signal]:
    src = "py-spy samples inside " + {"gap": "GPU/torch-op idle gaps", "slow": "the slowest requests/steps"}[prefix]
    busy_name = f"join.{prefix}_busy_thread_pct"
    if not j or not j.threads:
        why = reason if not j else ("no windows to join" if not j.windows else pyspy_reason)
        return {busy_name: missing(busy_name, "%", src, why)}
    out = {busy_name: Signal(busy_name, j.threads[0].busy_pct, "%", src + f", busiest thread {j.threads[0].thread}")}
    shares = {c.name: c.share_pct for c in j.categories}
    if shares:
        for cat in ALL_CATEGORIES:
            if cat not in PARKED:
                n = f"join.{prefix}_category_share_pct[{cat}]"
                out[n] = Signal(n, shares.get(cat, 0.0), "%", src + ", share of non-idle thread-time")
    return out


def _imported_names(bundle: Bundle) -> dict[str, str]:
    """Member file name -> the name of the file it was imported from (TORCH ``imported_from``)."""
    return {Path(r.file).name: Path(r.imported_from).name for r in bundle.typed(TORCH)
            if r.file is not None and r.imported_from is not None}


def _apart(reports: list[TraceReport], reason: str, capture: tuple[int, int] | None,
           names: dict[str, str] | None = None) -> tuple[list[TraceReport], TraceGroups | None]:
    """Traces that do not belong together (signals/trace_groups.py): the signals read the group
    inside the capture window, else the one with the largest GPU window; every group's own signal
    values go to the details, with a warning."""
    groups = trace_groups(reports, capture)
    if len(groups) < 2:
        return reports, None
    rows: list[TraceGroup] = []
    for g in groups:
        sig = trace_signals([reports[j] for j in g], reason)
        rows.append(TraceGroup(
            files=tuple(Path(reports[j].path).name for j in g),
            torch_traces=tuple({"temporal": {"span_ns": r.temporal.span_ns, "events": r.temporal.events}
                                if r.temporal else None,
                                "coverage": {"host_span_ns": r.tables["coverage"]["host_span_ns"]}}
                               for r in (reports[j] for j in g)),
            signals={n: s.value for n, s in sig.items() if s.value is not None}))

    def named(files: tuple[str, ...]) -> str:
        return ", ".join(f"{f} ({names[f]})" if names and f in names else f for f in files)

    left = "; ".join(named(r.files) for r in rows[1:])
    warning = (f"{len(reports)} torch traces do not belong together ({why_apart(reports, groups)}): each group "
               f"is analysed on its own; the verdict (and a job of several ranks) reads {named(rows[0].files)} "
               f"({'inside the capture window' if capture else 'the largest GPU window'}); left apart: {left}")
    return [reports[j] for j in groups[0]], TraceGroups(warning=warning, groups=tuple(rows))


def _excluded_note(ss: SpanSet) -> str | None:
    """One sentence on the server-lifetime root spans left out of the request statistics."""
    ex = excluded(ss)
    if ex is None:
        return None
    names = ", ".join(ex["names"])
    return (f"{ex['count']} root span(s) ({names}; the longest {ex['longest_s']:.0f} s) left out of the request "
            f"statistics (QPS, latency, window) as server-lifetime spans: {ex['rule']}")


def _repeated_note(ss: SpanSet) -> str | None:
    """One sentence on spans whose (trace id, span id) another span already has: ids come from the
    target, which may repeat them (a broken id generator, a replayed export), and the request
    statistics then count each id's stages once (signals/spans/analytics.py ``_requests``)."""
    ids = {(s.trace_id, s.span_id) for s in ss.spans}
    repeated = len(ss.spans) - len(ids)
    if not repeated:
        return None
    return (f"{repeated} of {len(ss.spans)} spans repeat the (trace id, span id) of another: requests sharing "
            "an id share its stages, each counted once in the first of them (check the target's id generator, "
            "or an exporter that sends a batch twice)")


def _typed(summary: dict[str, Any], kind: type[T]) -> T:
    """A span summary (signals/spans/) as its Details section; numpy scalars as their numbers."""
    return msgspec.convert(msgspec.to_builtins(summary, enc_hook=scalar), kind)


def timeline_signals(bundle: Bundle, params: AnalysisParams = DEFAULT_PARAMS) -> SourceResult:
    """gpu.*/kernels.*/torch.*, spans.*/llm.* and join.* signals; ``params.timeline`` sets the gap,
    kernel-wait and short-kernel thresholds."""
    all_reports, trace_errors = _reports(bundle, params.timeline)
    imported = bundle.info.end_reason == "imported"  # its window is the files' own span
    names = _imported_names(bundle) if imported else None
    reports, apart = _apart(all_reports, NO_TRACE, None if imported else _capture_window(bundle), names)
    job, not_ranks = job_of(reports, names)
    torch_reason = NO_TRACE if not trace_files(bundle) else "; ".join(trace_errors) or NO_TRACE
    if "agent" in bundle.collectors and not reports:
        torch_reason = collector_reason(bundle, "agent") + f" ({NO_TRACE})"
    collectors = bundle.info.collectors
    records, left_out, sampling = sample_of(bundle)
    if sampling is not None:
        sampling = dataclasses.replace(sampling, left_out=left_out)
    scale = sampling.scale if sampling is not None else 1.0
    ss = parsed_sample(bundle)
    window = recording_window(collectors, _capture_window(bundle), {str(r.source) for r in records})
    coverage = span_coverage(collectors, window, ss.spans)
    summary = _typed(request_summary(ss, window, coverage.covered if coverage else None, scale), RequestsDetail)
    if coverage is not None and summary.requests:
        summary = msgspec.structs.replace(summary, coverage=RequestsCoverage(
            covered_s=round(coverage.covered_s, 3), window_s=round(coverage.window_s, 3),
            spans_dropped=coverage.dropped))
    llm = _typed(llm_summary(ss.spans, summary.window_s, scale), LlmDetail)
    tail_all = tail_summary(ss.requests, [(p.start_ns, p.end_ns) for p in bundle.typed(GC)])
    tail_windows = tail_all.pop("windows", [])
    tail = _typed(tail_all, TailDetail)
    stacks = load_timed_stacks(bundle)
    gap_j, slow_j = _gap_join(reports, stacks, ss), _slow_join(reports, tail, tail_windows, stacks, ss)
    span_reason = NO_SPANS if not ss.spans else "spans recorded but none is a request (root span)"
    signals = trace_signals(reports, torch_reason)
    signals.update(rank_signals(job, not_ranks))
    signals.update(request_signals(summary, tail, span_reason))
    if ss.spans:
        signals.update(llm_signals(llm))
    pyspy_reason = ("no py-spy samples fall inside the windows" if stacks
                    else collector_reason(bundle, "pyspy") + " (no py-spy stacks to join)")
    signals.update(join_signals("gap", gap_j, torch_reason, pyspy_reason))
    signals.update(join_signals("slow", slow_j, span_reason if not reports else "no requests or steps",
                                pyspy_reason))
    details = Details(torch_traces=tuple(r.to_json() for r in reports), trace_groups=apart,
                      ranks=job.to_json() if job else None, requests=summary, llm=llm if ss.spans else None,
                      tail=tail, join=Joins(gaps=gap_j, slow=slow_j))
    damage = [f"{Path(r.path).name}: {note}" for r in all_reports for note in r.read.damage.notes()]
    torch = TorchQuality(traces=len(all_reports), trace_errors=tuple(trace_errors), trace_damage=tuple(damage),
                         trace_late=late_trace_statement(bundle, len(all_reports)),
                         traces_apart=apart.warning if apart else None, ranks_not_compared=not_ranks or None,
                         ranks_notes=tuple(job.notes) if job else (),
                         device_not_recorded=tuple(w for r in reports if (w := r.device_not_recorded)))
    spans = SpansQuality(
        count=len(ss.spans), invalid=ss.invalid, requests_excluded=_excluded_note(ss), repeated_ids=_repeated_note(ss),
        coverage=coverage.quality() if coverage else None, sampling=sampling.quality() if sampling else None,
        sampled=sampling.statement() if sampling else None,
        outside_window=(f"none of the {summary.ended_outside_window} requests (root spans) ended inside the "
                        "capture window: QPS and in-flight are unknown, their latencies are shown as recorded "
                        "(the spans' clock is not the capture's?)") if summary.ended_outside_window else None)
    quality = DataQuality(torch=torch, spans=spans)
    return SourceResult(signals, quality, details)


def late_trace_statement(bundle: Bundle, traces_read: int) -> str | None:
    """What a torch window still exporting when attach gave up waiting means for this report
    (the agent collector's ``torch_export_pending``, collectors/agent.py): the trace arrived later
    and is included, or it never arrived. None when attach did not give up."""
    st = bundle.info.collector("agent")
    counts = st.counts_as(CollectorCounts) if st is not None else None
    if counts is None or not counts.torch_export_pending:
        return None
    if traces_read > (counts.torch_traces or 0):
        return ("a torch trace arrived after the capture's first report (the agent was still exporting it): "
                "this report includes it")
    return ("the agent was still exporting a torch window when attach stopped waiting and its trace has not "
            "arrived: the kernel timeline misses that window (run `diagnose report BUNDLE` again once it lands)")


__all__ = ["AGENT_THREAD_PREFIX", "bundle_specs", "device_peak", "late_trace_statement", "load_timed_stacks",
           "read_member_trace",
           "timeline_signals", "trace_files"]

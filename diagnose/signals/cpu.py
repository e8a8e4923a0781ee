"""CPU signal source: py-spy stacks + process collector -> signals, thread table, top stacks."""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass

import msgspec

from diagnose.bundle import Bundle
from diagnose.bundle.records import PyspyWindowRecord
from diagnose.bundle.streams import PROCESS, PYSPY, PYSPY_SOURCES, PYSPY_WINDOWS, THREADS
from diagnose.catalogs.frames import ALL_CATEGORIES, PARKED, Category
from diagnose.model import Signal, StackShare, ThreadSummary, missing
from diagnose.results.details import Details, TopFunction
from diagnose.results.quality import DataQuality, PyspyQuality
from diagnose.signals.base import SourceResult, collector_reason
from diagnose.signals.join import TimedStack
from diagnose.signals.params import DEFAULT_PARAMS, AnalysisParams
from diagnose.signals.process import ProcessSummary, process_signals, summarize, target_alive_signal
from diagnose.signals.process_gaps import process_gaps
from diagnose.signals.pyspy_rate import WindowRate, rate_quality, window_rate
from diagnose.signals.stacks import Frame, Segment, StackProfile, categorize, segments_from_chrometrace
from diagnose.signals.threads import KernelTimeline, Reading, thread_usage

PYSPY_SRC = "py-spy (chrometrace, sampled thread-time)"
AGENT_THREAD_PREFIX = "diagnose-"  # the agent's own threads in the target: the measurement, not the service
KERNEL_TOLERANCE_NS = 60_000_000  # a reading within 60 ms of a segment speaks for it (10 Hz readings)


class PyspyTimeline:
    """Per thread, when py-spy saw it parked (waiting for work), on the Unix clock."""

    def __init__(self) -> None:
        self._spans: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)

    def add(self, tid: int, start_ns: int, end_ns: int, cat: str) -> None:
        self._spans[tid].append((start_ns, end_ns, cat in PARKED))

    def parked_at(self, tid: int, t_ns: int) -> bool:
        spans = self._spans.get(tid)
        if not spans:
            return False
        i = bisect.bisect_right(spans, (t_ns, float("inf"), True)) - 1
        return i >= 0 and spans[i][0] <= t_ns <= spans[i][1] and spans[i][2]

    def sort(self) -> None:
        for spans in self._spans.values():
            spans.sort()


def load_sources(bundle: Bundle) -> dict[tuple[str, int], str]:
    """The source line behind each sampled ``file:line`` (the PYSPY_SOURCES stream)."""
    return {(r.file, r.line): r.text for r in bundle.typed(PYSPY_SOURCES)}


@dataclass(frozen=True)
class PyspyWindow:
    """One indexed py-spy window and the stacks rebuilt from its chrometrace (``segments`` None:
    its file is missing, unreadable, or not a regular file inside the bundle)."""

    record: PyspyWindowRecord
    segments: tuple[Segment, ...] | None


def pyspy_windows(bundle: Bundle) -> tuple[PyspyWindow, ...]:
    """Every py-spy window in window order, its file parsed once per bundle: the CPU and the
    timeline sources both read them (a window's JSON is the largest thing they parse)."""
    def parse() -> tuple[PyspyWindow, ...]:
        return tuple(PyspyWindow(w, window_segments(bundle, w.file))
                     for w in sorted(bundle.typed(PYSPY), key=lambda r: r.window))

    return bundle.derived("pyspy.windows", parse)


def window_key(file: str | None) -> tuple[str, str | None]:
    """The ``Bundle.derived`` key of one window file's stacks."""
    return ("pyspy.window", file)


def window_segments(bundle: Bundle, file: str | None) -> tuple[Segment, ...] | None:
    """The stacks of py-spy window file ``file`` (None: missing, unreadable, not a regular file inside
    the bundle), once per bundle; a capture parses each window as it arrives (diagnose/capture/ahead.py)
    and the analysis takes that result while the file is unchanged."""
    def parse() -> tuple[Segment, ...] | None:
        events = bundle.read_file(PYSPY_WINDOWS, file)
        return None if events is None else tuple(segments_from_chrometrace(events))

    return bundle.derived(window_key(file), parse)


def load_timed_stacks(bundle: Bundle) -> list[TimedStack]:
    """py-spy stacks on the Unix clock: window ``origin_ns`` + chrometrace ``ts`` (µs), built once
    per bundle (the CPU source counts them, the timeline joins them).

    The agent's own threads in the target (named ``diagnose-*``) are left out: they are the
    measurement, not the service. A thread's name is the one py-spy reported in any sample.
    """
    return list(bundle.derived("pyspy.timed_stacks", lambda: tuple(_timed_stacks(bundle))))


def thread_names(bundle: Bundle) -> dict[int, str]:
    """tid -> thread name over every py-spy window (a segment may carry "?" where another names it)."""
    return bundle.derived("pyspy.thread_names", lambda: {
        seg.tid: seg.thread for w in pyspy_windows(bundle) for seg in (w.segments or ()) if seg.thread != "?"})


def _agent_thread(names: dict[int, str], tid: int, fallback: str = "?") -> bool:
    """The agent's own thread in the target: the measurement, not the service's work."""
    return names.get(tid, fallback).startswith(AGENT_THREAD_PREFIX)


def _timed_stacks(bundle: Bundle) -> list[TimedStack]:
    sources = load_sources(bundle)
    segs = []
    for w in pyspy_windows(bundle):
        origin = w.record.origin
        if origin is not None and w.segments is not None:
            segs += [(origin, seg) for seg in w.segments]
    names = thread_names(bundle)
    out = []
    for origin, seg in segs:
        name = names.get(seg.tid, "?")
        if _agent_thread(names, seg.tid):
            continue
        cat = stack_category(bundle, seg.frames, sources)
        out.append(TimedStack(seg.tid, name, origin + int(seg.start_us * 1000),
                              origin + int(seg.end_us * 1000), seg.frames, cat))
    return out


def stack_category(bundle: Bundle, frames: tuple[Frame, ...], sources: dict[tuple[str, int], str]) -> str:
    """The frame catalog's category of a stack, classified once per bundle."""
    cache: dict[tuple[Frame, ...], str] = bundle.derived("pyspy.categories", dict)
    cat = cache.get(frames)
    if cat is None:
        cat = cache[frames] = categorize(frames, sources)
    return cat


def load_profile(bundle: Bundle, kernel: KernelTimeline | None = None
                 ) -> tuple[StackProfile, PyspyTimeline, list[PyspyWindowRecord], int]:
    """Read every py-spy window of the bundle.

    Returns (profile, parked timeline, window records, number of unreadable windows).
    """
    sources = load_sources(bundle)
    profile, timeline = StackProfile(), PyspyTimeline()
    windows = pyspy_windows(bundle)
    names = thread_names(bundle)
    bad = 0
    for window in windows:
        if window.segments is None:
            bad += 1
            continue
        origin = window.record.origin
        for seg in window.segments:
            if _agent_thread(names, seg.tid, seg.thread):
                continue
            cat = stack_category(bundle, seg.frames, sources)
            reading = None
            if kernel is not None and origin is not None:
                reading = kernel.at(seg.tid, int(origin + (seg.start_us + seg.end_us) * 500), KERNEL_TOLERANCE_NS)
            cat = resolve_io(cat, reading)
            profile.add(seg, cat)
            if origin is not None:
                timeline.add(seg.tid, int(origin + seg.start_us * 1000), int(origin + seg.end_us * 1000), cat)
    timeline.sort()
    return profile, timeline, [w.record for w in windows], bad


def resolve_io(cat: str, reading: Reading | None) -> str:
    """py-spy shows where a thread is, not what it waits on; the kernel reading decides.

    A Python frame in socket/file code while the thread sleeps in a futex waits for the GIL (or a
    lock) after its IO returned; running mostly in the kernel it is copying data (the volume moved
    is the cost); running in user space a generic read/write call is CPU work in C (e.g. StringIO).
    Without a reading nearby, socket calls count as waits and generic calls as possible waits.
    """
    if cat not in (Category.IO_WAIT, Category.IO_MAYBE):
        return cat
    if reading is None:
        return Category.IO_WAIT
    if reading.cls == "lock_wait":
        return Category.LOCK_WAIT
    if reading.cls == "running":
        in_kernel = reading.sys_share is not None and reading.sys_share >= 0.5
        return Category.IO_CPU if cat == Category.IO_WAIT or in_kernel else Category.PYTHON
    return Category.IO_WAIT


def stack_signals(profile: StackProfile, reason: str) -> dict[str, Signal]:
    out: dict[str, Signal] = {}
    active = profile.active_s
    for cat in ALL_CATEGORIES:
        if cat in PARKED:
            continue
        name = f"cpu.category_share_pct[{cat}]"
        if profile.sampled_s <= 0:
            out[name] = missing(name, "%", PYSPY_SRC, reason)
        elif active <= 0:
            out[name] = missing(name, "%", PYSPY_SRC, "every sampled thread was idle (no load during the capture?)")
        else:
            out[name] = Signal(name, 100.0 * profile.by_category.get(cat, 0.0) / active, "%",
                               PYSPY_SRC + ", share of non-idle thread-time")
    name = "cpu.input_pipeline_share_pct"
    parts = (f"cpu.category_share_pct[{Category.INPUT_PIPELINE}]", f"cpu.category_share_pct[{Category.INPUT_WAIT}]")
    known = [out[p] for p in parts if out[p].known]
    out[name] = (Signal(name, sum(s.value or 0.0 for s in known), "%", PYSPY_SRC + ", input_pipeline + input_wait")
                 if known else missing(name, "%", PYSPY_SRC, out[parts[0]].reason or reason))
    name = "cpu.idle_share_pct"
    out[name] = (Signal(name, 100.0 * (profile.sampled_s - active) / profile.sampled_s, "%", PYSPY_SRC)
                 if profile.sampled_s > 0 else missing(name, "%", PYSPY_SRC, reason))
    out["stacks.sampled_s"] = (Signal("stacks.sampled_s", profile.sampled_s, "s", PYSPY_SRC)
                               if profile.sampled_s > 0 else missing("stacks.sampled_s", "s", PYSPY_SRC, reason))
    return out


MODEL_WORKER_SHARE = 0.5  # a thread in framework compute this share of its sampled time is a model worker


def worker_signals(profile: StackProfile, in_flight: Signal | None, reason: str) -> dict[str, Signal]:
    """Threads doing model work, and in-flight connections per such thread (queueing seen from outside)."""
    names = ("cpu.model_workers", "tcp.in_flight_per_model_worker")
    if profile.sampled_s <= 0:
        return {names[0]: missing(names[0], "threads", PYSPY_SRC, reason),
                names[1]: missing(names[1], "x", PYSPY_SRC, reason)}
    workers = sum(1 for tid, cats in profile.thread_category.items()
                  if cats.get(Category.FRAMEWORK_COMPUTE, 0.0) >= MODEL_WORKER_SHARE * profile.by_thread[tid] > 0)
    out = {names[0]: Signal(names[0], float(workers), "threads",
                            PYSPY_SRC + f", threads >= {MODEL_WORKER_SHARE:.0%} of their samples in framework compute")}
    if in_flight is None or in_flight.value is None:
        why = (in_flight.reason if in_flight else None) or "no TCP readings"
        out[names[1]] = missing(names[1], "x", PYSPY_SRC, why)
    elif not workers:
        out[names[1]] = missing(names[1], "x", PYSPY_SRC, "no thread spent most of its samples in model work")
    else:
        out[names[1]] = Signal(names[1], in_flight.value / workers, "x",
                               "process collector accepted TCP connections / py-spy model-worker threads")
    return out


def window_rates(bundle: Bundle) -> list[WindowRate]:
    """The achieved rate of every readable py-spy window whose rate was asked, not assumed."""
    asked = bundle.info.options.pyspy_window_s
    default_s = float(max(1, math.ceil(asked))) if asked is not None else None
    rates = [window_rate(w.record, w.segments, default_s) for w in pyspy_windows(bundle)
             if w.segments is not None and not w.record.rate_assumed]
    return [r for r in rates if r is not None]


def _requested_hz(bundle: Bundle) -> float | None:
    """The py-spy rate the user asked for (``--rate``, manifest options)."""
    return bundle.info.options.rate_hz


def _lowered_by(bundle: Bundle) -> str | None:
    """Why the overhead budget first lowered py-spy's rate (manifest ``budget.changes``), if it did."""
    budget = bundle.info.budget
    changes = budget.changes if budget is not None else ()
    return next((c.why[:200] for c in changes if c.pyspy_hz is not None and c.why), None)


def _option_period(bundle: Bundle) -> float | None:
    """The process collector's interval from the manifest options (bundles before ``period_s``)."""
    hz = bundle.info.options.process_hz
    return 1.0 / hz if hz is not None else None


def pyspy_quality(windows: list[PyspyWindowRecord], bad: int, stack_segments: int = 0,
                  rate: PyspyQuality | None = None) -> PyspyQuality:
    """The py-spy section: window, sample and error counts, the gaps between windows and the
    clock alignment error, over ``rate`` (rate_quality's achieved-rate figures)."""
    samples = sum(w.samples or 0 for w in windows)
    errors = sum(w.errors or 0 for w in windows)
    last = [w.last_ts_us or 0.0 for w in windows]
    origins = [w.origin for w in windows]
    gaps_ms = [(ob - (oa + la * 1000)) / 1e6 for oa, ob, la in zip(origins, origins[1:], last)
               if oa is not None and ob is not None]
    return msgspec.structs.replace(
        rate or PyspyQuality(), windows=len(windows), unreadable_windows=bad, samples=samples, errors=errors,
        error_ratio=round(errors / (samples + errors), 4) if samples + errors else None,
        gap_between_windows_ms_max=round(max(gaps_ms), 1) if gaps_ms else None,
        gap_between_windows_ms_mean=round(sum(gaps_ms) / len(gaps_ms), 1) if gaps_ms else None,
        clock_alignment_error_ms_max=round(max((w.origin_err_ns or 0 for w in windows), default=0) / 1e6, 1)
        if windows else None,
        stack_segments=stack_segments)


def top_stacks(profile: StackProfile, n: int = 10) -> tuple[StackShare, ...]:
    active = profile.active_s
    if active <= 0:
        return ()
    rows = sorted(((secs, key) for key, secs in profile.by_stack.items() if key[1] not in PARKED),
                  key=lambda r: (-r[0], [f.label() for f in r[1][0]], r[1][1]))
    return tuple(
        StackShare(_threads_label(profile.stack_threads[key]), tuple(f.label() for f in key[0]),
                   key[1], 100.0 * secs / active, secs)
        for secs, key in rows[:n]
    )


def _threads_label(names: set[str]) -> str:
    """One thread's name, or how many threads and one of their names ("?": py-spy read none)."""
    named = sorted(n for n in names if n != "?")
    if len(names) == 1:
        return next(iter(names))
    return f"{len(names)} threads" + (f", e.g. {named[0]}" if named else "")


def top_functions(profile: StackProfile, n: int = 10) -> tuple[TopFunction, ...]:
    active = profile.active_s
    if active <= 0:
        return ()
    ranked = sorted(profile.total_s.items(),
                    key=lambda kv: (-profile.self_s.get(kv[0], 0), -kv[1], kv[0].label()))
    return tuple(TopFunction(fr.label(), round(100.0 * profile.self_s.get(fr, 0) / active, 2),
                             round(100.0 * tot / active, 2)) for fr, tot in ranked[:n])


def thread_table(profile: StackProfile, proc: ProcessSummary | None) -> tuple[ThreadSummary, ...]:
    tids = set(profile.by_thread) | (set(proc.threads) if proc else set())
    rows = []
    for tid in tids:
        cats = profile.thread_category.get(tid)
        usage = proc.threads.get(tid) if proc else None
        cpu = 100.0 * usage.cpu_s / proc.elapsed_s if usage and proc and proc.elapsed_s > 0 else None
        comm = proc.comm.get(tid) if proc else None
        name = profile.thread_names.get(tid, "?")
        name = (comm or "?") if name == "?" else name
        rows.append(ThreadSummary(
            tid, name if tid in profile.by_thread else f"[native] {name}", cpu,
            max(sorted(cats), key=cats.__getitem__) if cats else None, profile.by_thread.get(tid, 0.0),
            usage.dominant_state() if usage else None,
        ))
    rows.sort(key=lambda t: (-(t.cpu_pct or 0.0), -t.sampled_s, t.tid))
    return tuple(rows)


def cpu_signals(bundle: Bundle, params: AnalysisParams = DEFAULT_PARAMS) -> SourceResult:
    proc_records = sorted(bundle.typed(PROCESS), key=lambda r: r.t_ns)
    proc = summarize(proc_records, bundle.typed(THREADS))
    kernel = KernelTimeline(proc.threads if proc else thread_usage(proc_records))
    profile, timeline, windows, bad = load_profile(bundle, kernel)
    signals = stack_signals(profile, collector_reason(bundle, "pyspy"))
    python_tids = set(profile.by_thread) if profile.sampled_s > 0 else None
    signals.update(process_signals(proc, collector_reason(bundle, "process"), python_tids,
                                   timeline.parked_at))
    signals.update(worker_signals(profile, signals.get("tcp.in_flight_mean"), collector_reason(bundle, "pyspy")))
    signals["capture.target_alive_s"] = target_alive_signal(bundle.info.end_reason, bundle.info.window_ns)
    host = signals.get("sys.cpu_util_pct")
    rate = rate_quality(window_rates(bundle), _requested_hz(bundle), host.value if host is not None else None,
                        _lowered_by(bundle))
    quality = DataQuality(
        pyspy=pyspy_quality(windows, bad, len(load_timed_stacks(bundle)), rate),
        process=msgspec.structs.replace(process_gaps(proc_records, _option_period(bundle)),
                                        records=len(proc_records)))
    return SourceResult(signals, quality, threads=thread_table(profile, proc),
                        top_stacks=top_stacks(profile),
                        details=Details(top_functions=top_functions(profile)))

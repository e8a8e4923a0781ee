"""The live side of the TUI: run a Capture in its own thread and read its partial bundle.

Threading contract: the capture runs in the thread ``LiveSession`` starts and calls
``on_progress`` from its wait loop; that callback only stores a reference (never blocks, never
takes a lock the UI holds). ``LiveFeed`` is used from one Textual worker thread at a time: it
tails the process streams and has ``analyze`` re-run on the partial bundle (in a low-priority
child process, see background_analysis.py); its results reach the widgets only as messages. Nothing here
touches Textual.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diagnose.bundle.records.manifest import ManifestInfo, target_info
from diagnose.bundle.streams import PROCESS, SERVING, SPANS, THREADS
from diagnose.capture.session import Capture, CaptureResult, Progress
from diagnose.model import Analysis, Report
from diagnose.tui.live.adapt import header_view, live_view
from diagnose.tui.live.adapt_gpu import gpu_history_values
from diagnose.tui.live.background_analysis import AnalysisFailed, BackgroundAnalyser
from diagnose.tui.live.engine import EngineSeries
from diagnose.tui.live.frames import FrameWindow, window_frames
from diagnose.tui.live.series import ProcessSeries, RequestSeries, SignalHistory
from diagnose.tui.live.tail import JsonlTail
from diagnose.tui.viewmodels import LiveHeaderVM, LiveVM

STOPPED_FROM_TUI = "stopped from the TUI"
SERVING_BYTES_PER_READ = 4 << 20  # a few scrape records per poll (the collector writes one a second)
SPANS_BYTES_PER_READ = 2 << 20  # ~5k spans per poll (2 polls/s): a span flood is read over several


def _analyse_and_write(result: CaptureResult) -> Report:
    from diagnose.pipeline import analyse_and_write

    return analyse_and_write(result.bundle_path)


class LiveSession:
    """One capture running in a background thread, observed without blocking it.

    ``finish``: the pipeline's end of a capture (analyse with its overrides, write the documents),
    called once by ``finish_capture``; ``overrides``: the same --thresholds, for the provisional
    analyses of the partial bundle.
    """

    def __init__(self, capture: Capture, stop: threading.Event,
                 finish: Callable[[CaptureResult], Report] = _analyse_and_write,
                 overrides: dict[str, float] | None = None):
        self.capture = capture
        self.stop = stop
        self.finish = finish
        self.overrides = dict(overrides or {})
        self.report: Report | None = None
        self.latest: Progress | None = None
        self.result: CaptureResult | None = None
        self.error: Exception | None = None
        self.done = threading.Event()
        self.started_monotonic: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.started_monotonic = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="capture", daemon=True)
        self._thread.start()

    def _on_progress(self, progress: Progress) -> None:
        self.latest = progress  # a single reference store: the capture never waits on the UI

    def _run(self) -> None:
        try:
            self.result = self.capture.run(self.stop, self._on_progress)
        except Exception as exc:  # handed to the main thread by the runner, which re-raises it
            self.error = exc
        finally:
            self.done.set()

    def finish_capture(self) -> Report:
        """The Report of the ended capture (``finish`` runs once). Raises what ``finish`` raises
        (DocumentsNotWritten carries the Report)."""
        if self.result is None:
            raise RuntimeError("the capture has not ended")
        try:
            self.report = self.finish(self.result)
        except Exception as exc:
            self.report = getattr(exc, "report", None)
            raise
        return self.report

    def request_stop(self, reason: str = STOPPED_FROM_TUI) -> None:
        trigger = getattr(self.stop, "trigger", None)
        if trigger is not None:
            trigger(reason)
        else:
            self.stop.set()

    @property
    def stopping(self) -> bool:
        return self.stop.is_set() and not self.done.is_set()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def header(self) -> LiveHeaderVM:
        p = self.latest
        target = target_info(self.capture.target.to_json())
        status = "stopping…" if self.stopping else "capturing"
        if p is None:
            return header_view(target, 0.0, self.capture.options.duration_s, {}, {}, status)
        return header_view(target, p.elapsed_s, p.remaining_s, p.counts, p.states, status)


@dataclass
class FeedStats:
    """What the feed did, for tests and the benchmark: analyses received and their latency
    (request to answer, wall seconds: the child's CPU time plus waiting at low priority)."""

    analyses: int = 0
    analysis_s_total: float = 0.0
    analysis_s_max: float = 0.0


class LiveFeed:
    """Reads the partial bundle of a LiveSession; one instance per capture, one thread at a time."""

    def __init__(self, session: LiveSession):
        self.session = session
        self.cpu = ProcessSeries()
        self.history = SignalHistory()
        self.requests = RequestSeries()
        self.engine = EngineSeries()
        self.stats = FeedStats()
        self._frames: FrameWindow | None = None
        self._process: JsonlTail | None = None
        self._names: JsonlTail | None = None
        self._spans: JsonlTail | None = None
        self._serving: JsonlTail | None = None
        self._analysis: Analysis | None = None
        self._manifest = ManifestInfo()
        self._analysed_s: float | None = None
        self._error: str | None = None
        self._analyser = BackgroundAnalyser()
        self._asked: tuple[float, Progress | None] = (0.0, None)

    def start(self) -> None:
        """Spawn the analysis child (before the App runs, see BackgroundAnalyser.start)."""
        self._analyser.start()

    @property
    def bundle_path(self) -> Path | None:
        return self.session.capture.bundle_path

    def drain(self) -> int:
        """Read the process records appended since the last call; returns how many."""
        path = self.bundle_path
        if path is None:
            return 0
        if self._process is None or self._names is None or self._spans is None or self._serving is None:
            self._process, self._names = JsonlTail(path / PROCESS.name), JsonlTail(path / THREADS.name)
            self._spans = JsonlTail(path / SPANS.name, SPANS_BYTES_PER_READ)
            self._serving = JsonlTail(path / SERVING.name, SERVING_BYTES_PER_READ)
        for rec in self._names.read():
            self.cpu.add_raw_name(rec)
        now_ns = time.time_ns()
        for rec in self._spans.read():
            self.requests.add(rec, now_ns)
        for rec in self._serving.read():
            self.engine.add(rec)
        n = 0
        for rec in self._process.read():
            self.cpu.add_raw(rec)
            n += 1
        return n

    def analyse(self) -> bool:
        """Ask the analysis child for a fresh analysis of the partial bundle, unless one is under
        way; take its answer when ready. Never blocks. Returns True when a new analysis arrived."""
        path = self.bundle_path
        if path is None:
            return False
        try:
            got = self._analyser.poll()
            if got is None:
                if not self._analyser.pending:
                    self._asked = (time.perf_counter(), self.session.latest)
                    self._analyser.request(path, self.session.overrides)
                return False
        except AnalysisFailed as exc:
            # the manifest appears once every collector has started: not yet a bundle is no error
            self._error = None if exc.bundle_error else str(exc)
            return False
        prev = self._analysis
        self._analysis, self._manifest = got
        self._error = None
        self._frames = window_frames(prev.top_stacks if prev else (), self._analysis.top_stacks) or self._frames
        t0, p = self._asked
        took = time.perf_counter() - t0
        if p is not None:
            self._analysed_s = p.elapsed_s
            self.history.add(p.elapsed_s, history_values(self._analysis))
        self.stats.analyses += 1
        self.stats.analysis_s_total += took
        self.stats.analysis_s_max = max(self.stats.analysis_s_max, took)
        return True

    def close(self) -> None:
        """End the analysis child (idempotent); the series stay readable."""
        self._analyser.close()

    def view(self) -> LiveVM:
        p = self.session.latest
        return live_view(self._analysis, self._manifest, self.cpu.snapshot(), self.history.snapshot(),
                         self._analysed_s, self._error, elapsed_s=p.elapsed_s if p is not None else 0.0,
                         first_verdict_s=self.session.capture.options.pyspy_window_s, frames=self._frames,
                         requests=self.requests.snapshot(), engine=self.engine.snapshot())


def history_values(a: Analysis) -> dict[str, float]:
    """The values each analysis adds to the SignalHistory: the GPU counters' running averages."""
    return gpu_history_values(a)


def replay_view(report: Report) -> tuple[LiveHeaderVM, LiveVM]:
    """The live view as it looked when a finished capture ended: every process record through the
    same series (as parsed for the analysis), and the Report's analysis of the whole bundle."""
    bundle, analysis = report.bundle, report.analysis
    cpu = ProcessSeries()
    for name in bundle.typed(THREADS):
        cpu.add_name(name)
    for rec in bundle.typed(PROCESS):
        cpu.add(rec)
    m = bundle.info
    elapsed_s = ((m.ended_ns or 0) - (m.started_ns or 0)) / 1e9
    header = header_view(m.target, max(0.0, elapsed_s), 0.0, {c.name: c.counts for c in m.collectors},
                         {c.name: c.state for c in m.collectors}, "captured")
    history = SignalHistory()
    history.add(elapsed_s, history_values(analysis))
    requests = RequestSeries()
    for rec in bundle.stream(SPANS):
        requests.add(dict(rec))
    return header, live_view(analysis, m, cpu.snapshot(), history.snapshot(), elapsed_s,
                             requests=requests.snapshot())

"""The Textual App and ``make_app``, the one factory the CLI and the tests share.

Modes: results (``diagnose tui BUNDLE``), live (a capture running in a LiveSession: the live view,
then the results view when it ends) and replay (the live view as it looked at the end of a
finished bundle; used by ``diagnose tui --live`` and the snapshot tests). Work that reads the
bundle runs in thread workers and reaches the screens only as messages.
"""
from __future__ import annotations

import select
import threading
import time
from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.worker import get_current_worker

from diagnose.model import Report
from diagnose.pipeline import DocumentsNotWritten
from diagnose.render import RENDERERS
from diagnose.tui.export import export, export_keys
from diagnose.tui.help import HelpScreen
from diagnose.tui.live.feed import LiveFeed, LiveSession, replay_view
from diagnose.tui.live.screen import LiveScreen
from diagnose.tui.messages import CaptureEnded, LiveUpdate, ProgressUpdate, ResultsReady
from diagnose.tui.results.adapt import results_view
from diagnose.tui.results.screen import ResultsScreen
from diagnose.tui.viewmodels import LiveHeaderVM, LiveVM

POLL_S = 0.5  # header and CPU series refresh; each redraw costs the capture's process GIL time
ANALYSE_EVERY_S = 1.0  # provisional verdict refresh
REPAINT_S = 5.0
EXIT_CHECK_S = 0.25
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


def terminal_gone(fd: int = 0) -> bool:
    """True once the terminal behind ``fd`` has hung up (its window closed, its pty master gone)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return any(ev & _GONE for _, ev in poller.poll(0))


class DiagnoseApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "diagnose"
    ENABLE_COMMAND_PALETTE = False  # the footer's room goes to the keys that matter here
    BINDINGS = [  # one export key per registered renderer that declares one
        *(Binding(key, f"export('{fmt}')", title) for key, fmt, title in export_keys()),
        Binding("question_mark", "help", "Help"),
        Binding("q", "stop_capture", "Stop capture"),
        Binding("ctrl+c", "stop_capture", "Stop capture", show=False, priority=True),
        Binding("q", "close", "Quit"),
    ]

    def __init__(self, *, results: Report | None = None, session: LiveSession | None = None,
                 replay: tuple[LiveHeaderVM, LiveVM] | None = None, export_dir: Path | None = None):
        super().__init__()
        self.results = results
        self.session = session
        self.replay = replay
        self.feed: LiveFeed | None = None
        self._live: tuple[LiveSession, LiveFeed] | None = None  # the capture and its feed, together
        if session is not None:
            self.feed = LiveFeed(session)
            self.feed.start()
            self._live = (session, self.feed)
        self.export_dir = export_dir or Path.cwd()
        self.exported: list[Path] = []
        # Set (by the runner's SIGTERM/SIGINT/SIGHUP handlers, or when the terminal hangs up) to
        # the reason to leave: a capture is stopped and its report written first.
        self.exit_requested: str | None = None
        self._ui_closed = threading.Event()

    @property
    def capturing(self) -> bool:
        return self.session is not None and self.results is None

    def on_mount(self) -> None:
        if self.replay is not None:
            self.push_screen(LiveScreen(*self.replay))
        elif self._live is not None:
            session, feed = self._live
            self.push_screen(LiveScreen(session.header()))
            session.start()
            self._watch_progress(session)
            self._watch_bundle(session, feed)
            # `diagnose run --capture` shares the terminal with the command it started: repaint
            # the whole screen now and then so the command's own output does not linger over it.
            self.set_interval(REPAINT_S, self.refresh)
        elif self.results is not None:
            self._show_results(self.results)
        self.set_interval(EXIT_CHECK_S, self._check_exit)

    def _check_exit(self) -> None:
        if self.exit_requested is None and not self.is_headless and terminal_gone():
            self.exit_requested = "terminal closed"
        if self.exit_requested is None:
            return
        if self.session is not None and self.capturing:  # stop, let the final analysis write the report
            if not self.session.done.is_set():
                self.session.request_stop(self.exit_requested)
            return
        self.exit()

    def on_unmount(self) -> None:
        self._ui_closed.set()
        if self.feed is not None:
            self.feed.close()

    def _show_results(self, report: Report) -> None:
        self.results = report
        screen = ResultsScreen(results_view(report.analysis, report.bundle.info, report.bundle.path.name))
        if self.screen_stack and isinstance(self.screen, LiveScreen):
            self.switch_screen(screen)
        else:
            self.push_screen(screen)
        self.refresh_bindings()

    # -- live capture: two thread workers, results only as messages ---------------------------

    @work(thread=True, name="progress")
    def _watch_progress(self, session: LiveSession) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled and not self._ui_closed.is_set():
            self.post_message(ProgressUpdate(session.header()))
            if session.done.is_set():
                return
            session.done.wait(POLL_S)

    @work(thread=True, name="live-analysis")
    def _watch_bundle(self, session: LiveSession, feed: LiveFeed) -> None:
        worker = get_current_worker()
        next_analysis = 0.0
        while not worker.is_cancelled and not self._ui_closed.is_set():
            done = session.done.is_set()
            changed = feed.drain() > 0
            if not done and time.monotonic() >= next_analysis and feed.analyse():
                next_analysis = time.monotonic() + ANALYSE_EVERY_S
                changed = True
            if changed or done:  # redraw only for new data: drawing takes the capture's GIL
                self.post_message(LiveUpdate(feed.view()))
            if done:
                feed.close()
                self.post_message(CaptureEnded())
                return
            session.done.wait(POLL_S)

    def on_progress_update(self, message: ProgressUpdate) -> None:
        if isinstance(self.screen, LiveScreen):
            self.screen.show_header(message.header)

    def on_live_update(self, message: LiveUpdate) -> None:
        if isinstance(self.screen, LiveScreen):
            self.screen.show_live(message.vm)

    def on_capture_ended(self, _: CaptureEnded) -> None:
        session = self.session
        if session is None or session.error is not None or session.result is None:
            self.exit()  # the runner re-raises the capture's error in the main thread
            return
        self.notify("capture ended: analysing the whole bundle…", timeout=3)
        self._final_analysis(session)

    @work(thread=True, name="final-analysis")
    def _final_analysis(self, session: LiveSession) -> None:
        # The pipeline's own finish (its --thresholds, documents written once): the runner hands
        # the same Report back to the CLI, which never analyses again.
        try:
            self.post_message(ResultsReady(session.finish_capture()))
        except DocumentsNotWritten as exc:  # cannot write findings.json/report.md: still show them
            self.post_message(ResultsReady(exc.report, f"could not write findings.json/report.md: {exc}"))

    def on_results_ready(self, message: ResultsReady) -> None:
        if self.exit_requested:
            self.results = message.report  # written to disk already; nobody is there to browse it
            self.exit()
            return
        self._show_results(message.report)
        if message.error:
            self.notify(message.error, severity="error", timeout=10)

    # -- keys ------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        browsing = self.results is not None
        if action == "stop_capture":
            return self.capturing
        if action == "close":
            return not self.capturing
        if action == "export":
            return browsing and str(parameters[0]) in RENDERERS
        return True

    def action_stop_capture(self) -> None:
        if self.session is not None and not self.session.done.is_set():
            self.session.request_stop()
            self.notify("stopping the capture; the results follow", timeout=3)
            self.on_progress_update(ProgressUpdate(self.session.header()))

    def action_close(self) -> None:
        self.exit()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(export_keys()))

    def action_export(self, fmt: str) -> None:
        if self.results is None:
            return
        try:
            path = export(self.results, fmt, self.export_dir)
        except (OSError, KeyError) as exc:
            self.notify(f"export {fmt} failed: {exc}", severity="error", timeout=8)
            return
        self.exported.append(path)
        self.notify(f"wrote {path}", title=f"export {fmt}", timeout=6)


def make_app(report: Report | None = None, *, session: LiveSession | None = None, live: bool = False,
             export_dir: Path | None = None) -> DiagnoseApp:
    """The App for the CLI and the tests.

    ``report``: the pipeline's Report of a bundle (diagnose.pipeline.analyse) to browse, or with
    ``live`` the live view as it looked at the bundle's end. ``session``: a capture to run and
    watch. Exports go to ``export_dir`` (default: the current directory). The App never analyses
    a bundle on its own: the live view's provisional analyses and the final Report come from the
    pipeline with the session's overrides.
    """
    if session is not None and report is None:
        return DiagnoseApp(session=session, export_dir=export_dir)
    if report is None or session is not None:
        raise ValueError("make_app needs exactly one of report or session")
    if live:
        return DiagnoseApp(replay=replay_view(report), export_dir=export_dir)
    return DiagnoseApp(results=report, export_dir=export_dir)

"""Which view a command gets: the Textual TUI on a terminal, else headless output.

The TUI needs stdin, stdout and stderr on a terminal whose TERM is not "dumb"; ``--no-tui`` forces
headless. Headless ``attach`` keeps the rich progress line on a terminal stderr; headless ``tui``
prints the Markdown report. NO_COLOR is honoured by Textual and rich themselves.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from diagnose.capture.session import Capture, CaptureResult
from diagnose.model import Report

if TYPE_CHECKING:
    from diagnose.pipeline import Finish
    from diagnose.tui.app import DiagnoseApp


def tui_capable(no_tui: bool = False) -> bool:
    """Textual reads keys from stdin and draws on stderr; stdout must be a terminal too, so that
    ``diagnose tui B > file`` gets the report rather than escape codes."""
    return (not no_tui and all(s.isatty() for s in (sys.stdin, sys.stdout, sys.stderr))
            and os.environ.get("TERM", "") not in ("", "dumb"))


def line_capable(no_tui: bool = False) -> bool:
    return not no_tui and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def capture_view(no_tui: bool = False, export_dir: Path | None = None, overrides: dict[str, float] | None = None):
    """The CaptureView for this terminal (diagnose/pipeline.py): the live TUI when possible, else
    the progress line on a terminal stderr, else silent."""
    if tui_capable(no_tui):
        return LiveTuiView(export_dir, overrides)
    from diagnose.capture.progress import HeadlessView

    return HeadlessView(line_capable(no_tui))


class LiveTuiView:
    """The capture runs in its own thread while the App owns the terminal; the App shows the
    pipeline's Report when the capture ends. The capture always ends and is joined before ``run``
    returns, whatever happened to the UI."""

    def __init__(self, export_dir: Path | None = None, overrides: dict[str, float] | None = None):
        self.export_dir = export_dir
        self.overrides = dict(overrides or {})

    def run(self, capture: Capture, stop: threading.Event, finish: Finish) -> tuple[CaptureResult, Report | None]:
        """Raises what ``Capture.run`` raises (OSError, TargetError), in this thread."""
        from diagnose.tui.app import make_app
        from diagnose.tui.live.feed import LiveSession

        session = LiveSession(capture, stop, finish, self.overrides)
        app = make_app(session=session, export_dir=self.export_dir or capture.out_dir)
        try:
            self.run_app(app)
        finally:
            if session.started_monotonic is not None and not session.done.is_set():
                session.request_stop("TUI closed")
            session.join()
            if app.feed is not None:
                app.feed.close()
        if session.error is not None:
            raise session.error
        if session.result is None:  # the App ended before it could start the capture
            return capture.run(stop), None
        return session.result, session.report

    def run_app(self, app: DiagnoseApp) -> None:
        """Run the App on this terminal until it exits (the tests drive it with Textual's pilot)."""
        with exit_on_signals(app):
            app.run()


def browse_bundle(report: Report, no_tui: bool = False, export_dir: Path | None = None,
                  live: bool = False) -> int:
    """``diagnose tui BUNDLE``: browse the pipeline's Report, or print its Markdown when there is
    no terminal for the TUI. Returns 0."""
    if not tui_capable(no_tui):
        from diagnose.render import render

        sys.stdout.write(str(render(report, "md")))
        return 0
    from diagnose.tui.app import make_app

    app = make_app(report, live=live, export_dir=export_dir)
    with exit_on_signals(app):
        app.run()
    return 0


CAPTURE_FINISH_S = 300.0  # a capture asked to stop is given this long to write its report
EXIT_GRACE_S = 5.0  # then the App this long to leave before diagnose leaves without it


def _leave_if_stuck(app, signum: int) -> None:
    """After a signal: once the capture (if any) has written its report, give the App EXIT_GRACE_S
    to shut down, then end the process. Textual's shutdown can block forever writing to a terminal
    that was closed (its writer thread gone), and a process stuck there keeps the attach lock."""
    live = getattr(app, "_live", None)
    if live is not None:
        live[0].done.wait(CAPTURE_FINISH_S)
    time.sleep(EXIT_GRACE_S)
    if live is not None and live[0].result is not None and live[0].report is None:
        with contextlib.suppress(Exception):  # the UI never got to it: the report is written here, once
            live[0].finish_capture()
    with contextlib.suppress(OSError):
        sys.stderr.write(f"diagnose: the terminal UI did not exit after {EXIT_SIGNALS.get(signal.Signals(signum))}; "
                         "leaving without it\n")
    os._exit(128 + signum)


# In raw mode Ctrl-C is a key, so these come from outside (kill, a closed terminal window).
EXIT_SIGNALS = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)",
                signal.SIGHUP: "hangup (SIGHUP)"}


@contextmanager
def exit_on_signals(app) -> Iterator[None]:
    """While ``app`` runs, a signal asks it to leave cleanly (stopping and reporting a capture
    first) instead of killing the process with the terminal still in raw mode."""
    def handler(signum, _frame) -> None:
        app.exit_requested = app.exit_requested or EXIT_SIGNALS[signum]
        if not watchdog:
            watchdog.append(threading.Thread(target=_leave_if_stuck, args=(app, signum), name="diagnose-tui-exit",
                                             daemon=True))
            watchdog[0].start()

    watchdog: list[threading.Thread] = []

    previous = {sig: signal.signal(sig, handler) for sig in EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

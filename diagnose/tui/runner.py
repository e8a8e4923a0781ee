"""Which view a command gets: the Textual TUI on a terminal, else headless output.

The TUI needs stdin, stdout and stderr on a terminal whose TERM is not "dumb"; ``--no-tui`` forces
headless. Headless ``attach`` keeps the rich progress line on a terminal stderr; headless ``tui``
prints the Markdown report. NO_COLOR is honoured by Textual and rich themselves.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from diagnose.capture.session import Capture, CaptureResult


def tui_capable(no_tui: bool = False) -> bool:
    """Textual reads keys from stdin and draws on stderr; stdout must be a terminal too, so that
    ``diagnose tui B > file`` gets the report rather than escape codes."""
    return (not no_tui and all(s.isatty() for s in (sys.stdin, sys.stdout, sys.stderr))
            and os.environ.get("TERM", "") not in ("", "dumb"))


def line_capable(no_tui: bool = False) -> bool:
    return not no_tui and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def capture_with_view(capture: Capture, stop: threading.Event, no_tui: bool = False,
                      export_dir: Path | None = None) -> CaptureResult:
    """Run ``capture`` with the live TUI when possible, else with the progress line or silently.

    Raises what ``Capture.run`` raises (OSError, TargetError), in this thread.
    """
    if tui_capable(no_tui):
        return run_live_tui(capture, stop, export_dir or capture.out_dir)
    from diagnose.capture.progress import live_progress

    with live_progress(line_capable(no_tui)) as progress:
        return capture.run(stop, progress)


def run_live_tui(capture: Capture, stop: threading.Event, export_dir: Path) -> CaptureResult:
    """The capture runs in its own thread while the App owns the terminal; the capture always
    ends and is joined before this returns, whatever happened to the UI."""
    from diagnose.tui.app import make_app
    from diagnose.tui.live.feed import LiveSession

    session = LiveSession(capture, stop)
    app = make_app(session=session, export_dir=export_dir)
    try:
        with exit_on_signals(app):
            app.run()
    finally:
        if session.started_monotonic is not None and not session.done.is_set():
            session.request_stop("TUI closed")
        session.join()
        app.feed.close()
    if session.error is not None:
        raise session.error
    if session.result is None:  # the App ended before it could start the capture
        return capture.run(stop)
    return session.result


def browse_bundle(bundle: Path, no_tui: bool = False, export_dir: Path | None = None,
                  live: bool = False) -> int:
    """``diagnose tui BUNDLE``. Raises BundleError when ``bundle`` is not a bundle. Returns 0."""
    from diagnose.verdict.analyze import analyze
    from diagnose.bundle import Bundle
    from diagnose.render import RENDERERS

    if not tui_capable(no_tui):
        b = Bundle.open(bundle)
        sys.stdout.write(RENDERERS["md"]().render(analyze(b), b.manifest))
        return 0
    from diagnose.tui.app import make_app

    app = make_app(bundle, live=live, export_dir=export_dir)
    with exit_on_signals(app):
        app.run()
    return 0


# In raw mode Ctrl-C is a key, so these come from outside (kill, a closed terminal window).
EXIT_SIGNALS = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)",
                signal.SIGHUP: "hangup (SIGHUP)"}


@contextmanager
def exit_on_signals(app) -> Iterator[None]:
    """While ``app`` runs, a signal asks it to leave cleanly (stopping and reporting a capture
    first) instead of killing the process with the terminal still in raw mode."""
    def handler(signum, _frame) -> None:
        app.exit_requested = app.exit_requested or EXIT_SIGNALS[signum]

    previous = {sig: signal.signal(sig, handler) for sig in EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

"""How a capture ends early: a StopFlag set by Ctrl-C, SIGTERM or a dropped terminal, with its reason."""
from __future__ import annotations

import signal
import threading
from types import FrameType


class StopFlag(threading.Event):
    """Set by Ctrl-C/SIGTERM/SIGHUP or the TUI; ``reason`` ends up in the manifest's end_reason."""

    reason: str | None = None

    def trigger(self, reason: str) -> None:
        if not self.is_set():
            self.reason = reason
        self.set()


STOP_SIGNALS = ((signal.SIGINT, "interrupted (SIGINT)"), (signal.SIGTERM, "terminated (SIGTERM)"),
                (signal.SIGHUP, "hung up (SIGHUP, terminal closed)"))


def install_stop_handlers(stop: StopFlag) -> None:
    """During a capture, Ctrl-C, kill and a dropped SSH session end it cleanly (partial bundle).
    Only from the main thread (Python's rule for signal handlers)."""
    for sig, name in STOP_SIGNALS:
        signal.signal(sig, lambda *_a, _n=name: stop.trigger(_n))


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds: `finally` blocks stop children (the demo's service)


def restore_signal_handlers() -> None:
    """Outside a capture a signal aborts (the bundle is complete); cleanup code still runs."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)

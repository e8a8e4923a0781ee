"""How a capture ends early, and what signals do until its report is written.

From the start of an attach until its ``report:`` line, SIGINT, SIGTERM and SIGHUP go to one
``StopSignals``:

- the first stops the capture, which then finishes: collectors stop, the bundle is analysed, the
  report is written;
- a second during that finishing phase is ignored and says so (``finishing, again to abort``);
- a third aborts: it prints the bundle's path and ``diagnose analyze BUNDLE`` (which writes the
  report later), then diagnose exits with 128 + the signal's number.

A signal within ``REPEAT_S`` of the previous one is a repeat of it, not a new request: a supervisor
that stops and retries every 50 ms, or a held Ctrl-C, sends one request however many signals it
sends, so it gets its report. Python runs handlers between bytecodes of the main thread, so a burst
that arrives while it is busy in C code (orjson on a large file) reaches the handler late and as
one call; the C-level handler also writes one byte per signal to a wakeup pipe
(``signal.set_wakeup_fd``) at arrival, so a call that finds two or more is a burst, never a new request.
Outside a capture a signal exits at once with 128 + its number (``restore_signal_handlers``),
running cleanup code on the way, never click's "Aborted!".
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

REPEAT_S = 1.0  # a signal this soon after the previous one repeats it
FINISHING = "diagnose: finishing, again to abort"


class StopFlag(threading.Event):
    """Set by Ctrl-C/SIGTERM/SIGHUP or the TUI; ``reason`` ends up in the manifest's end_reason."""

    reason: str | None = None

    def trigger(self, reason: str) -> None:
        if not self.is_set():
            self.reason = reason
        self.set()


STOP_SIGNALS = ((signal.SIGINT, "interrupted (SIGINT)"), (signal.SIGTERM, "terminated (SIGTERM)"),
                (signal.SIGHUP, "hung up (SIGHUP, terminal closed)"))
_NAMES: dict[int, str] = {int(sig): name for sig, name in STOP_SIGNALS}


class CaptureAborted(BaseException):
    """A third signal ended the capture's finishing phase; its line (the bundle) is printed.
    A BaseException, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"aborted by signal {signum}")
        self.exit_code = 128 + signum


def _stderr(line: str) -> None:
    # straight to fd 2: a handler can run while the main thread is inside sys.stderr's own
    # buffered write, and writing through it then raises "reentrant call"
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode(errors="backslashreplace"))


class StopSignals:
    """The signal policy of one attach (see the module docstring). A context manager: installs
    the handlers on entry (main thread only, Python's rule) and restores the exit handlers on exit.

    ``bundle`` says where the bundle is once it exists; ``finishing`` is set when the capture has
    ended by itself, so that a first signal then warns instead of stopping what has stopped.
    """

    def __init__(self, stop: StopFlag | None = None, write: Callable[[str], None] = _stderr,
                 clock: Callable[[], float] = time.monotonic):
        self.stop = stop if stop is not None else StopFlag()
        self.write = write
        self.clock = clock
        self.bundle: Callable[[], Path | None] = lambda: None
        self.finishing = False
        self._last_s: float | None = None
        self._warned = False
        self._installed = False
        self._wakeup: _WakeupPipe

    def handle(self, signum: int, arrived: int = 1) -> None:
        """One handler call for ``arrived`` signals: stop, warn, or (raises CaptureAborted) abort."""
        now = self.clock()
        repeat = arrived >= 2 or (self._last_s is not None and now - self._last_s < REPEAT_S)
        self._last_s = now
        name = _NAMES.get(signum, f"signal {signum}")
        if not (self.stop.is_set() or self.finishing):
            self.stop.trigger(name)
        elif repeat or not self._warned:
            if not self._warned:
                self._warned = True
                self.write(FINISHING)
        else:
            self.write(self._abort_line(name))
            raise CaptureAborted(signum)

    def _abort_line(self, name: str) -> str:
        path = self.bundle()
        if path is None:
            return f"diagnose: aborted ({name}) before a bundle was created"
        return (f"diagnose: aborted ({name}): bundle {path} (its report may be missing); "
                f"write it with `diagnose analyze {path}`")

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._wakeup = _WakeupPipe()
            for sig, _ in STOP_SIGNALS:
                signal.signal(sig, lambda signum, _frame: self.handle(signum, self._wakeup.arrived()))
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaves ``settled`` handlers: the rest of a burst is still ignored (the exit code stays
        the report's), a new signal exits with 128 + its number."""
        if self._installed:
            for sig, _ in STOP_SIGNALS:
                signal.signal(sig, self._settled)
            self._wakeup.close()
            self._installed = False

    def _settled(self, signum: int, _frame: FrameType | None) -> None:
        now = self.clock()
        repeat = self._last_s is not None and now - self._last_s < REPEAT_S
        self._last_s = now
        if not repeat:
            raise SystemExit(128 + signum)


class _WakeupPipe:
    """Counts signals as they arrive: Python's C-level handler writes a byte per signal to the
    wakeup fd, whatever the main thread is doing. Main thread only."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.previous = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)

    def arrived(self) -> int:
        """Signals since the last call (at least 1: the call itself is one). Re-installs the pipe
        when something else (asyncio, under the TUI) took the wakeup fd meanwhile."""
        if signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False) != self.write_fd:
            return 1
        count = 0
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.read_fd, 4096):
                count += len(chunk)
        return max(1, count)

    def close(self) -> None:
        try:
            signal.set_wakeup_fd(self.previous)
        except (ValueError, OSError):  # the previous owner closed its fd meanwhile
            signal.set_wakeup_fd(-1)
        os.close(self.read_fd)
        os.close(self.write_fd)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds: `finally` blocks stop children (the demo's service)


def restore_signal_handlers() -> None:
    """Outside a capture a signal exits with 128 + its number (the bundle is complete, or none
    was started); cleanup code still runs, and click prints no "Aborted!"."""
    for sig, _ in STOP_SIGNALS:
        signal.signal(sig, _exit_on_signal)


def default_signal_actions() -> None:
    """For commands with nothing to clean up (analyze, report, compare...): the kernel's own action,
    so a signal ends diagnose at once with 128 + its number even inside a long C call (a Python
    handler runs only between bytecodes: parsing a huge hostile file would delay it by minutes)."""
    for sig, _ in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def ignore_stop_signals() -> None:
    """Right before diagnose exits with its report written: the tail of a burst changes nothing.
    (Python's finalization resets Python-level handlers to the default action, and a signal then
    would end the process by it, turning exit code 0 into death by signal; SIG_IGN is left alone.)"""
    for sig, _ in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)

"""Headless capture view: the live progress line on a TTY (rich), or nothing."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from diagnose.capture.session import Capture, CaptureResult, Progress

if TYPE_CHECKING:
    from diagnose.pipeline import Finish


def _line(p: Progress) -> str:
    parts = [f"[bold]diagnose[/] {p.elapsed_s:5.1f}s elapsed, {p.remaining_s:5.1f}s left"]
    for name, counts in p.counts.items():
        shown = ", ".join(f"{k} {v}" for k, v in counts.items())
        parts.append(f"{name}: {shown}" if shown else name)
    for name, state in p.states.items():
        if state not in ("running",):
            parts.append(f"{name}: [yellow]{state}[/]")
    return " · ".join(parts)


@contextmanager
def live_progress(enabled: bool) -> Iterator[Callable[[Progress], None] | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console(stderr=True)
    with Live(Text(""), console=console, refresh_per_second=4, transient=True) as live:
        yield lambda p: live.update(Text.from_markup(_line(p)))


class HeadlessView:
    """A CaptureView (diagnose/pipeline.py) without a TUI: the progress line when ``line`` (a
    terminal stderr), else silent. It leaves the analysis to the pipeline."""

    def __init__(self, line: bool):
        self.line = line

    def run(self, capture: Capture, stop: threading.Event, finish: Finish) -> tuple[CaptureResult, None]:
        with live_progress(self.line) as progress:
            return capture.run(stop, progress), None

"""Messages that carry frozen view-models from worker threads to the screens."""
from __future__ import annotations

from textual.message import Message

from diagnose.model import Report
from diagnose.tui.viewmodels import LiveHeaderVM, LiveVM


class ProgressUpdate(Message):
    """Elapsed/remaining and collector states (4 Hz). A newer one replaces a queued older one."""

    def __init__(self, header: LiveHeaderVM):
        super().__init__()
        self.header = header

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ProgressUpdate)


class LiveUpdate(Message):
    """Panels and the provisional verdict from the partial bundle (about 1 Hz)."""

    def __init__(self, vm: LiveVM):
        super().__init__()
        self.vm = vm

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LiveUpdate)


class CaptureEnded(Message):
    """The capture thread returned (or raised); the final analysis starts."""


class ResultsReady(Message):
    """The pipeline's Report of the finished capture (``error``: its documents were not written)."""

    def __init__(self, report: Report, error: str | None = None):
        super().__init__()
        self.report = report
        self.error = error

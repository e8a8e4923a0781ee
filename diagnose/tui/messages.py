"""Messages that carry frozen view-models from worker threads to the screens."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.message import Message

from diagnose.model import Analysis
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


@dataclass(frozen=True)
class ResultsData:
    """What the results view and the exports need."""

    analysis: Analysis
    manifest: dict[str, Any]
    bundle_path: Path


class ResultsReady(Message):
    def __init__(self, data: ResultsData | None, error: str | None = None):
        super().__init__()
        self.data = data
        self.error = error

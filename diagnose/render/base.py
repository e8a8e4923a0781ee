"""What a renderer is: a named output format that turns a whole Report into one document."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from diagnose.model import Report


class Renderer(ABC):
    """One output format. ``render`` receives the whole Report (analysis, manifest and the
    opened bundle, so trace exports can read its streams) and returns the document: ``str`` for
    text formats, ``bytes`` where ``binary`` is set. Pure: it writes nothing itself."""

    format: ClassVar[str]  # the name users type: `report -f FORMAT`
    extension: ClassVar[str]  # of the file it belongs in, with the dot
    binary: ClassVar[bool] = False
    title: ClassVar[str]  # short name for the TUI footer, e.g. "Markdown"
    description: ClassVar[str]  # one line for `--help` and the TUI's help screen
    tui_key: ClassVar[str | None] = None  # the results view's export key, if any

    @abstractmethod
    def render(self, report: Report) -> str | bytes:
        """The whole document."""

"""Breakdown bars: each family of percentage signals (request stages, CPU categories, ...)."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from diagnose.tui.text import bar, shorten
from diagnose.tui.viewmodels import BarGroupVM

LABEL_CELLS = 18
VALUE_CELLS = 8


class BreakdownBars(Static):
    def __init__(self, groups: tuple[BarGroupVM, ...] = (), note: str = "", **kw):
        super().__init__(**kw)
        self._groups = groups
        self._note = note

    def on_mount(self) -> None:
        self._draw()

    def show(self, groups: tuple[BarGroupVM, ...], note: str = "") -> None:
        self._groups, self._note = groups, note
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width = max(20, self.size.width or 80)
        cells = max(4, width - LABEL_CELLS - VALUE_CELLS - 3)
        out = Text()
        if self._note:
            out.append(self._note + "\n", style="italic")
        for g in self._groups:
            out.append(g.title + "\n", style="bold")
            out.append(shorten(g.source, width) + "\n", style="dim")
            for b in g.bars:
                out.append(f"{shorten(b.label, LABEL_CELLS):<{LABEL_CELLS}} ")
                out.append(bar(b.pct, cells), style="bold" if (b.pct or 0) > 0 else "dim")
                out.append(f" {b.text}\n")
            if g.note:
                out.append(g.note + "\n", style="italic")
            out.append("\n")
        self.update(out)

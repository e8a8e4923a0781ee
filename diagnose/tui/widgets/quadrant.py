"""The verdict's four quadrant scores drawn as a 2x2 picture (compute | bandwidth / service | io)."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid
from textual.widgets import Static

from diagnose.tui.text import bar
from diagnose.tui.viewmodels import VerdictVM

ORDER = ("compute", "bandwidth", "service", "io")
BAR_CELLS = 8


class QuadrantGrid(Grid):
    """Each cell: the quadrant, its score (0..1) and a bar; the verdict's cell is marked with ▶
    (not only coloured, so it reads the same with NO_COLOR)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._cells = {q: Static(id=f"quadrant-{q}", classes="quadrant") for q in ORDER}

    def compose(self) -> ComposeResult:
        yield from self._cells.values()

    def show(self, vm: VerdictVM | None) -> None:
        cells = {c.quadrant: c for c in vm.cells} if vm else {}
        for q in ORDER:
            cell = cells.get(q)
            widget = self._cells[q]
            primary = bool(cell and cell.primary and cell.score > 0)
            widget.set_class(primary, "-primary")
            score = cell.score if cell else None
            head = Text(("▶ " if primary else "  ") + q.upper(), style="bold" if primary else "")
            line = Text("  " + ("  ?  " if score is None else f"{score:.2f} ") + bar(
                None if score is None else score * 100, BAR_CELLS))
            widget.update(Text("\n").join((head, line)))

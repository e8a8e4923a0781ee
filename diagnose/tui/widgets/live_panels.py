"""Live dashboard pieces: the capture header and the CPU / GPU / service panels."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from diagnose.tui.text import bar, shorten
from diagnose.tui.viewmodels import LiveHeaderVM, PanelVM

LABEL_CELLS = 14
VALUE_CELLS = 7
STATE_STYLE = {"running": "bold", "ok": "bold", "partial": "yellow", "unavailable": "dim", "failed": "red"}


class CaptureHeader(Static):
    """Target (pid, command, Python), elapsed/remaining with a bar, and every collector's state."""

    def show(self, vm: LiveHeaderVM) -> None:
        width = max(30, self.size.width or 80)
        total = vm.elapsed_s + vm.remaining_s
        pct = 100.0 * vm.elapsed_s / total if total > 0 else 0.0
        out = Text.assemble((f"{vm.status} ", "bold"),
                            shorten(f"{vm.target} · {vm.python}", width - len(vm.status) - 3), "\n")
        clock = f" {vm.elapsed_s:5.1f} s elapsed · {vm.remaining_s:5.1f} s left"
        out.append(bar(pct, max(5, width - len(clock) - 1)))
        out.append(clock + "\n")
        chips = Text()
        for c in vm.collectors:
            chips.append(c.name + " ", style="bold")
            chips.append(c.state, style=STATE_STYLE.get(c.state, ""))
            chips.append(f" ({c.counts})  " if c.counts else "  ")
        chips.truncate(width, overflow="ellipsis")
        out.append_text(chips if vm.collectors else Text("starting collectors…", style="italic"))
        self.update(out)


class MetricPanel(Vertical):
    """A bordered panel of label / value / sparkline lines, and a note saying what is missing.
    Metric lines are cut with an ellipsis at the panel's edge (CSS); the note wraps."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._lines = Static(classes="metric-lines")
        self._note = Static(classes="metric-note")

    def compose(self) -> ComposeResult:
        yield self._lines
        yield self._note

    def show(self, vm: PanelVM) -> None:
        self.border_title = vm.title
        out = Text()
        for i, line in enumerate(vm.lines):
            if i:
                out.append("\n")
            if not line.value:  # a heading inside the panel (e.g. one GPU): the whole label
                out.append(line.label, style="bold underline")
                continue
            out.append(f"{shorten(line.label, LABEL_CELLS):<{LABEL_CELLS}} ", style="bold")
            short = len(line.value) <= VALUE_CELLS
            out.append(f"{line.value:>{VALUE_CELLS}}" if short else line.value)
            if line.spark:
                out.append(" " + line.spark)
        self._lines.display = bool(vm.lines)
        self._lines.update(out)
        self._note.display = bool(vm.note)
        self._note.update(Text(vm.note, style="italic"))

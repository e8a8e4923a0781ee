"""The ? screen: every key, and what each tab and panel shows."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("/", "filter findings, stacks and signals; Enter keeps it, Esc clears it"),
    ("1 … 7", "jump to a results tab (Findings … Details)"),
    ("tab / shift+tab", "move focus between the tab bar and the lists"),
    ("← →", "switch tab when the tab bar has focus"),
    ("↑ ↓ enter", "move in a list; open or fold a stack"),
    ("?", "this help"),
    ("q", "quit (during a capture: stop it early and show the results)"),
)
LIVE = (
    ("tab / shift+tab", "move between the panels (the focused one has a bright border)"),
    ("enter", "open the focused panel over the whole screen with all its rows; enter or esc closes it"),
    ("/", "filter the threads, frames, stages and account rows; esc clears it"),
    ("sparklines", "one column per 1-10 s (the panel's caption says how many), newest at the right, "
     "at least the last 60 s"),
)
TABS = (
    ("Findings", "rules that fired, most severe first; the right side shows the evidence: values, "
     "thresholds, sources, time window, and what to try"),
    ("Stacks", "top py-spy stacks merged into a tree with their share of sampled time"),
    ("GPU gaps", "GPU idle gaps from the kernel timeline and what the CPU did meanwhile"),
    ("Breakdown", "request stage shares, CPU categories and latency percentiles"),
    ("Collectors", "each collector's state, reason and counts; data quality; what could not be judged"),
    ("Signals", "every signal with its value, unit and source ('unknown' says why)"),
    ("Details", "every table the analysis produced"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, exports: tuple[tuple[str, str, str], ...] = ()):
        """``exports``: (key, format, title) of the registered renderers with a key."""
        super().__init__()
        self.exports = exports

    def compose(self) -> ComposeResult:
        keys = [(k, f"export {title} ({fmt} renderer) to the export directory")
                for k, fmt, title in self.exports] + list(KEYS)
        with VerticalScroll(id="help-box"):
            yield Static(Text("Keys", style="bold underline"))
            yield Static(_grid(keys))
            yield Static(Text("\nLive dashboard", style="bold underline"))
            yield Static(_grid(LIVE))
            yield Static(Text("\nResults tabs", style="bold underline"))
            yield Static(_grid(TABS))
            yield Static(Text("\nThe live view re-runs the same analysis on the partial bundle every "
                              "second; its verdict is provisional until the capture ends. "
                              "Esc, q or ? closes this help.", style="dim"))


def _grid(rows) -> Table:
    """Two columns; the description wraps within its own column at any width."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(ratio=1)
    for key, what in rows:
        grid.add_row(key, what)
    return grid

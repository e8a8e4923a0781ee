"""The live view during a capture: header, CPU / GPU / service panels and the provisional verdict."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.screen import Screen
from textual.widgets import Footer

from diagnose.tui.viewmodels import LiveHeaderVM, LiveVM
from diagnose.tui.widgets.live_panels import CaptureHeader, MetricPanel
from diagnose.tui.widgets.quadrant import QuadrantGrid
from diagnose.tui.widgets.verdict import VerdictText

NARROW_COLS = 70  # below this the four panels stack in one column
SMALL_ROWS = 22


class LiveScreen(Screen):
    CSS_PATH = "live.tcss"

    def __init__(self, header: LiveHeaderVM, initial: LiveVM | None = None):
        super().__init__()
        self.updates = 0  # LiveUpdate messages drawn (tests check the view keeps up)
        self.last: LiveVM | None = None
        self._header = header
        # Held, not queried: updates may arrive before the grid's children are mounted.
        self.capture_header = CaptureHeader(id="capture-header")
        self.panels = {k: MetricPanel(id=f"{k}-panel") for k in ("cpu", "gpu", "service")}
        self.quadrants = QuadrantGrid(id="live-quadrants")
        self.verdict_text = VerdictText(id="live-verdict-text")
        self.verdict_text.show(None, "waiting for the first analysis")
        self.quadrants.show(None)
        if initial is not None:
            self.show_live(initial)

    def compose(self) -> ComposeResult:
        yield self.capture_header
        with Grid(id="panels"):
            yield from self.panels.values()
            with Vertical(id="live-verdict") as box:
                box.border_title = "Verdict so far"
                yield self.quadrants
                yield self.verdict_text
        yield Footer()

    def on_mount(self) -> None:
        self.show_header(self._header)
        self._fit(self.size.width, self.size.height)

    def on_resize(self, event) -> None:
        self._fit(event.size.width, event.size.height)
        self.show_header(self._header)

    def _fit(self, width: int, height: int) -> None:
        self.set_class(width < NARROW_COLS, "-narrow")
        self.set_class(height < SMALL_ROWS, "-small")

    def show_header(self, header: LiveHeaderVM) -> None:
        self._header = header
        self.capture_header.show(header)

    def show_live(self, vm: LiveVM) -> None:
        self.updates += 1
        self.last = vm
        self.panels["cpu"].show(vm.cpu)
        self.panels["gpu"].show(vm.gpu)
        self.panels["service"].show(vm.service)
        self.quadrants.show(vm.verdict)
        self.verdict_text.show(vm.verdict, vm.verdict_note)

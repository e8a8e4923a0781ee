"""The live view during a capture: header, CPU / GPU / service / account panels and the
provisional verdict. Keys: tab moves between panels, enter opens the focused panel full screen
(its whole lists), / filters the list rows of every panel, escape closes either."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input

from diagnose.tui.viewmodels import LiveHeaderVM, LiveVM
from diagnose.tui.widgets.live_panels import CaptureHeader, MetricPanel
from diagnose.tui.widgets.quadrant import QuadrantGrid
from diagnose.tui.widgets.verdict import VerdictText

NARROW_COLS = 70  # below this the panels stack in one column
SMALL_ROWS = 30  # below this the quadrant picture gives its rows to the verdict and account
PANELS = ("cpu", "gpu", "account", "service")
FILL = ("cpu", "service")  # these take the rest of their column and show more rows when they can


class LiveScreen(Screen):
    CSS_PATH = "live.tcss"
    BINDINGS = [
        Binding("enter", "zoom", "Open panel"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, header: LiveHeaderVM, initial: LiveVM | None = None):
        super().__init__()
        self.updates = 0  # LiveUpdate messages drawn (tests check the view keeps up)
        self.last: LiveVM | None = None
        self.zoomed: str | None = None
        self.needle = ""
        self._header = header
        # Held, not queried: updates may arrive before the grid's children are mounted.
        self.capture_header = CaptureHeader(id="capture-header")
        self.panels = {k: MetricPanel(id=f"{k}-panel", classes="-fill" if k in FILL else "") for k in PANELS}
        self.quadrants = QuadrantGrid(id="live-quadrants")
        self.verdict_text = VerdictText(id="live-verdict-text")
        self.filter_input = Input(placeholder="filter threads, frames, stages…", id="live-filter")
        self.verdict_text.show(None, "waiting for the first analysis")
        self.quadrants.show(None)
        if initial is not None:
            self.show_live(initial)

    def compose(self) -> ComposeResult:
        yield self.capture_header
        with Horizontal(id="panels"):
            with VerticalScroll(id="left", classes="column", can_focus=False):
                yield self.panels["cpu"]
                yield self.panels["gpu"]
            with VerticalScroll(id="right", classes="column", can_focus=False):
                with Vertical(id="live-verdict") as box:
                    box.border_title = "Verdict so far"
                    yield self.quadrants
                    yield self.verdict_text
                yield self.panels["account"]
                yield self.panels["service"]
        yield self.filter_input
        yield Footer()

    def on_mount(self) -> None:
        self.filter_input.display = False
        self.show_header(self._header)
        self._fit(self.size.width, self.size.height)
        self.panels["cpu"].focus()

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
        # the right column's spare rows go to the service panel once spans flow, else to the account
        spans = bool(vm.service.lines)
        self.panels["service"].set_class(spans, "-fill")
        self.panels["account"].set_class(not spans, "-fill")
        for key in PANELS:
            self.panels[key].show(getattr(vm, key), self.zoomed == key, self.needle)
        self.quadrants.show(vm.verdict)
        self.verdict_text.show(vm.verdict, vm.verdict_note)

    # -- keys ------------------------------------------------------------------------------------

    def action_zoom(self) -> None:
        """Open the focused panel over the whole panel area (enter again, or escape, closes it)."""
        focused = next((k for k, p in self.panels.items() if p.has_focus), None)
        self._zoom(None if focused is None or self.zoomed == focused else focused)

    def _zoom(self, key: str | None) -> None:
        self.zoomed = key
        self.set_class(key is not None, "-zoom")
        for k, panel in self.panels.items():
            panel.set_class(k == key, "-zoomed")
        column = None if key is None else ("left" if key in ("cpu", "gpu") else "right")
        for col in self.query(".column"):
            col.set_class(col.id == column, "-zoomed")
        self._redraw()

    def action_filter(self) -> None:
        self.filter_input.display = True
        self.filter_input.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.needle = event.value.strip()
        self._redraw()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.panels[self.zoomed or "cpu"].focus()  # keeps the filter

    def action_back(self) -> None:
        if self.filter_input.display and (self.filter_input.has_focus or self.needle):
            self.filter_input.value = ""
            self.needle = ""
            self.filter_input.display = False
            self.panels[self.zoomed or "cpu"].focus()
            self._redraw()
        elif self.zoomed is not None:
            self._zoom(None)

    def _redraw(self) -> None:
        if self.last is not None:
            for key in PANELS:
                self.panels[key].show(getattr(self.last, key), self.zoomed == key, self.needle)

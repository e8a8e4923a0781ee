"""The results view: verdict quadrant, findings with evidence, stacks, GPU gaps, breakdown,
collectors and data quality, all signals, and every details table."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, OptionList, Static, TabbedContent, TabPane, Tabs

from diagnose.tui.viewmodels import ResultsVM
from diagnose.tui.widgets.bars import BreakdownBars
from diagnose.tui.widgets.findings import EvidencePanel, FindingsList
from diagnose.tui.widgets.quadrant import QuadrantGrid
from diagnose.tui.widgets.stacks import StacksTree
from diagnose.tui.widgets.table import TableView
from diagnose.tui.widgets.verdict import VerdictText

TABS = ("findings", "stacks", "gaps", "breakdown", "collectors", "signals", "details")
NARROW_COLS = 110  # below this the evidence goes under the findings list
SMALL_ROWS = 22  # below this the quadrant picture gives way to the tabs


class ResultsScreen(Screen):
    CSS_PATH = "results.tcss"
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        *(Binding(str(i), f"tab({i})", f"tab {i}", show=False) for i in range(1, len(TABS) + 1)),
    ]

    def __init__(self, vm: ResultsVM):
        super().__init__()
        self.vm = vm
        self.needle = ""
        # Every widget gets its view-model now and draws it on its own mount: TabbedContent mounts
        # its panes after this screen's Mount event, so nothing here may rely on querying them.
        self.quadrants = QuadrantGrid(id="quadrants")
        self.quadrants.show(vm.verdict)
        self.verdict_text = VerdictText(id="verdict-text")
        self.verdict_text.show(vm.verdict)
        self.findings = FindingsList(vm.findings, id="findings")
        self.evidence = EvidencePanel(id="evidence")
        self.evidence.show(vm.findings[0] if vm.findings else None)
        self.stacks = StacksTree(vm.stacks, id="stacks")
        self.signals = TableView(vm.signals, id="signals")
        self.filter_box = Input(placeholder="filter findings, stacks and signals (Enter keeps, Esc clears)",
                                id="filter")
        self.filter_box.display = False

    def compose(self) -> ComposeResult:
        vm = self.vm
        yield Static(Text.assemble((vm.title, "bold"), "\n", (vm.capture, "dim")), id="results-title")
        with Horizontal(id="verdict-row"):
            yield self.quadrants
            yield self.verdict_text
        with TabbedContent(id="tabs"):
            with TabPane("Findings", id="tab-findings"):
                yield TableView(vm.account, id="account")
                with Container(id="findings-split"):
                    yield self.findings
                    yield self.evidence
            with TabPane("Stacks", id="tab-stacks"):
                yield Static(Text(vm.stacks_note, style="dim"), id="stacks-note")
                yield self.stacks
            with TabPane("GPU gaps", id="tab-gaps"):
                with VerticalScroll():
                    yield Static(Text(vm.gaps.headline, style="bold"), id="gaps-headline")
                    yield TableView(vm.gaps.table, id="gaps")
                    yield TableView(vm.gaps.during, id="gaps-during")
            with TabPane("Breakdown", id="tab-breakdown"):
                with VerticalScroll():
                    yield BreakdownBars(vm.bar_groups, vm.breakdown_note, id="bars")
                    yield TableView(vm.latency, id="latency")
            with TabPane("Collectors", id="tab-collectors"):
                with VerticalScroll():
                    yield TableView(vm.collectors, id="collectors")
                    yield TableView(vm.quality, id="quality")
                    yield TableView(vm.not_judged, id="not-judged")
            with TabPane("Signals", id="tab-signals"):
                yield self.signals
            with TabPane("Details", id="tab-details"):
                with VerticalScroll(id="details"):
                    for i, table in enumerate(vm.details):
                        yield TableView(table, id=f"detail-{i}")
                    if not vm.details:
                        yield Static(Text("no details tables in this analysis", style="italic"))
        yield self.filter_box
        yield Footer()

    def on_mount(self) -> None:
        self._fit(self.size.width, self.size.height)
        self.call_after_refresh(self.findings.focus)

    def on_resize(self, event) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        self.set_class(width < NARROW_COLS, "-narrow")
        self.set_class(height < SMALL_ROWS, "-small")

    def apply_filter(self, needle: str) -> None:
        """Narrow the findings list, the stacks tree and the signals table to ``needle``."""
        self.needle = needle
        self.findings.show(self.vm.findings, needle)
        empty = f"No finding matches {needle!r}." if needle and self.vm.findings else "No rule fired."
        self.evidence.show(self.findings.current(), empty)
        self.stacks.show(self.vm.stacks, needle)
        self.signals.show(self.vm.signals, needle)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list is self.findings:
            self.evidence.show(self.findings.current())

    def action_tab(self, number: int) -> None:
        tabs = self.query_one(TabbedContent)
        pane_id = f"tab-{TABS[number - 1]}"
        pane = tabs.get_pane(pane_id)
        # Focus moves first: a focused widget left in the old pane would pull it back to the front.
        target = next((w for w in pane.query("*") if w.focusable), None)
        (target or tabs.query_one(Tabs)).focus()
        tabs.active = pane_id

    def action_filter(self) -> None:
        self.filter_box.display = True
        self.filter_box.focus()

    def action_clear_filter(self) -> None:
        self.filter_box.value = ""
        self.filter_box.display = False
        self.apply_filter("")
        self.findings.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.apply_filter(event.value.strip())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = bool(event.value.strip())
            self.findings.focus()

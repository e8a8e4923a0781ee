"""A titled table (collectors, data quality, GPU idle gaps, signals, details), or why it is empty."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from diagnose.tui.viewmodels import TableVM


class TableView(Vertical):
    def __init__(self, vm: TableVM | None = None, **kw):
        super().__init__(**kw)
        # Children are held, not queried: show() works before they are mounted.
        self._title = Static(classes="table-title")
        self._table: DataTable = DataTable(zebra_stripes=True, cursor_type="row")
        self.rows_shown = 0
        if vm is not None:
            self.show(vm)

    def compose(self) -> ComposeResult:
        yield self._title
        yield self._table

    def show(self, vm: TableVM, needle: str = "") -> None:
        title, table = self._title, self._table
        rows = [r for r in vm.rows if not needle or any(needle.lower() in c.lower() for c in r)]
        self.rows_shown = len(rows)
        table.clear(columns=True)
        self.display = bool(rows or vm.rows or vm.empty)  # nothing to say: take no room
        if not rows:
            why = f"no row matches {needle!r}" if vm.rows else vm.empty
            title.update(Text.assemble((vm.title, "bold"), "\n", (why, "italic")))
            table.display = False
            return
        title.update(Text(vm.title, style="bold"))
        table.display = True
        table.add_columns(*vm.columns)
        table.add_rows([tuple(Text(c) for c in r) for r in rows])  # Text: frames hold [brackets]

"""Findings sorted by severity, and the evidence drill-down of the highlighted one."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from diagnose.tui.viewmodels import FindingVM

# Severity as a word as well as a colour, so it survives NO_COLOR and monochrome terminals.
SEVERITY_TAG = {"critical": ("CRIT", "bold red"), "warning": ("WARN", "yellow"), "info": ("INFO", "dim")}


class FindingsList(OptionList):
    """One line per finding; ``shown`` holds the findings that pass the current filter."""

    def __init__(self, findings: tuple[FindingVM, ...] = (), **kw):
        super().__init__(**kw)
        self._initial_vm = findings
        self.shown: tuple[FindingVM, ...] = ()

    def on_mount(self) -> None:
        self.show(self._initial_vm)

    def show(self, findings: tuple[FindingVM, ...], needle: str = "") -> None:
        self.shown = tuple(f for f in findings if f.matches(needle))
        self.clear_options()
        self.add_options([Option(_prompt(f), id=f"{i}:{f.rule_id}") for i, f in enumerate(self.shown)])
        if self.shown:
            self.highlighted = 0

    def current(self) -> FindingVM | None:
        i = self.highlighted
        return self.shown[i] if i is not None and 0 <= i < len(self.shown) else None


def _prompt(f: FindingVM) -> Text:
    tag, style = SEVERITY_TAG.get(f.severity, (f.severity[:4].upper(), ""))
    return Text.assemble((tag, style), " ", f.title, (f"  {f.quadrant} · {f.confidence:.2f}", "dim"))


class EvidencePanel(VerticalScroll):
    """Values, thresholds, sources and the time window behind one finding, then what to do."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._body = Static(id="evidence-body")

    def compose(self) -> ComposeResult:
        yield self._body

    def show(self, f: FindingVM | None, empty: str = "No rule fired.") -> None:
        body = self._body
        if f is None:
            body.update(Text(empty, style="italic"))
            return
        tag = SEVERITY_TAG.get(f.severity, (f.severity, ""))
        out = Text.assemble((f.title, "bold"), "\n",
                            (f"{f.quadrant} · {f.layer} layer · {tag[0].lower()} · "
                             f"confidence {f.confidence:.2f} · {f.rule_id}", "dim"), "\n", f.summary, "\n\n")
        out.append("Evidence\n", style="bold underline")
        for e in f.evidence:
            out.append(f"• {e.signal} = ")
            out.append(e.value, style="bold")
            out.append(f"  (threshold {e.threshold})\n")
            out.append(f"  source: {e.source}\n", style="dim")
        out.append(f"  window: {f.window}\n", style="dim")
        if f.suggestions:
            out.append("\nWhat to try, in order\n", style="bold underline")
            for i, s in enumerate(f.suggestions, 1):
                out.append(f"{i}. {s}\n")
        body.update(out)
        self.scroll_home(animate=False)

"""The verdict in words: quadrant, the layer to act on first, the layer plan and the headline."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from diagnose.tui.viewmodels import VerdictVM


class VerdictText(Static):
    def show(self, vm: VerdictVM | None, note: str = "") -> None:
        if vm is None:
            self.update(Text(note or "no verdict yet", style="italic"))
            return
        out = Text()
        if vm.quadrant == "unknown":
            out.append("VERDICT: UNKNOWN", style="bold")
        else:
            out.append(f"{vm.quadrant.upper()}-BOUND", style="bold reverse")
            if vm.layer:
                out.append(" · act on the ")
                out.append(vm.layer.upper(), style="bold")
                out.append(" layer first")
        out.append(f" · confidence {vm.confidence:.2f}")
        if vm.provisional:
            out.append(" · provisional", style="italic")
        if vm.plan:
            out.append("\nplan: " + " → ".join(vm.plan))
        out.append("\n" + vm.summary)
        if note:
            out.append("\n" + note, style="dim italic")
        self.update(out)

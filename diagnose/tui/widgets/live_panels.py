"""Live dashboard pieces: the capture header and the CPU / GPU / service / account panels."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from diagnose.tui.text import bar, column_step, distinct_short, downsample, shorten, spark
from diagnose.tui.viewmodels import CollectorChip, LiveHeaderVM, MetricLine, PanelVM, Trend

LABEL_CELLS = 14
VALUE_CELLS = 9  # the widest value column; narrower when every value is
MIN_VALUE_CELLS = 6
ITEM_VALUE_CELLS = 5
MIN_SPARK = 4
CHIP_LINES = 2  # the collector chips drop their counts rather than take more lines than this
STATE_STYLE = {"running": "bold", "ok": "bold", "partial": "yellow", "unavailable": "dim", "failed": "red"}


def chip_variants(c: CollectorChip) -> tuple[str, str, str]:
    """A collector chip with all its counts, with the first count only, and bare (name state)."""
    first = c.counts.split(", ")[0] if c.counts else ""
    bare = f"{c.name} {c.state}"
    return (f"{bare} ({c.counts})" if c.counts else bare, f"{bare} ({first})" if first else bare, bare)


def chip_lines(chips: tuple[CollectorChip, ...], width: int, max_lines: int = CHIP_LINES) -> list[list[str]]:
    """Every chip, packed into lines of ``width`` cells: the fullest variant that fits in
    ``max_lines`` lines, else the bare chips on as many lines as they need (never cut; a chip
    wider than the line is wrapped by the terminal)."""
    for level in range(3):
        lines: list[list[str]] = [[]]
        used = 0
        for c in chips:
            text = chip_variants(c)[level]
            need = len(text) + (2 if lines[-1] else 0)
            if lines[-1] and used + need > width:
                lines.append([])
                used, need = 0, len(text)
            lines[-1].append(text)
            used += need
        if len(lines) <= max_lines or level == 2:
            return lines
    raise AssertionError("unreachable")


class CaptureHeader(Static):
    """Target (pid, command, Python), elapsed/remaining with a bar, and every collector's state,
    wrapped onto a second line (and shortened to name and state) rather than cut."""

    def show(self, vm: LiveHeaderVM) -> None:
        width = max(30, self.size.width or 78)  # the content area, inside the padding
        total = vm.elapsed_s + vm.remaining_s
        pct = 100.0 * vm.elapsed_s / total if total > 0 else 0.0
        out = Text.assemble((f"{vm.status} ", "bold"),
                            shorten(f"{vm.target} · {vm.python}", width - len(vm.status) - 1), "\n")
        clock = f" {vm.elapsed_s:5.1f} s elapsed · {vm.remaining_s:5.1f} s left"
        out.append(bar(pct, max(5, width - len(clock))))
        out.append(clock + "\n")
        if not vm.collectors:
            out.append("starting collectors…", style="italic")
        states = {c.name: c.state for c in vm.collectors}
        for i, line in enumerate(chip_lines(vm.collectors, width)):
            if i:
                out.append("\n")
            for j, chip in enumerate(line):
                name, _, rest = chip.partition(" ")
                state, _, counts = rest.partition(" ")
                out.append(("  " if j else "") + name + " ", style="bold")
                out.append(state, style=STATE_STYLE.get(states.get(name, ""), ""))
                out.append(f" {counts}" if counts else "")
        self.update(out)


def trend_text(t: Trend, width: int) -> tuple[str, int]:
    """``width`` columns of sparkline (right-aligned: the newest at the right edge) and the
    seconds each column covers (at least HISTORY_MIN_S seconds across the width)."""
    step = column_step(width, t.bucket_s)
    cols = downsample(t.values, t.weights_s, step, t.merge)[-width:]
    return spark(cols, len(cols), t.hi).rjust(width), int(step * t.bucket_s)


def panel_lines(vm: PanelVM, width: int, zoomed: bool = False, needle: str = "",
                rows: int = 0) -> tuple[Text, str]:
    """The panel's text at ``width`` cells and its caption (seconds per sparkline column).
    ``zoomed``: with all of ``vm.more``, else as much of it as fits in ``rows`` lines; ``needle``:
    only the list rows containing it (case-insensitive), and the headings of lists with a row left."""
    extra = len(vm.more) if zoomed else max(0, rows - len(vm.lines))
    more = list(vm.more[:extra])
    if more and more[-1].kind == "heading":
        more.pop()
    lines = list(vm.lines) + more
    if needle:
        lines = _filtered(lines, needle.lower())
    item_w = max(4, width - ITEM_VALUE_CELLS - 1)
    metrics = [ln for ln in lines if ln.kind == "metric" and ln.value]
    label_w = min(LABEL_CELLS, max((len(ln.label) for ln in metrics), default=LABEL_CELLS))
    value_w = max(MIN_VALUE_CELLS, min(VALUE_CELLS, max((len(ln.value) for ln in metrics), default=0)))
    labels = distinct_short([ln.label for ln in metrics], label_w)
    items = distinct_short([ln.label for ln in lines if ln.kind == "item"], item_w)
    out, caption = Text(), ""
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        if line.kind == "heading" or (line.kind == "metric" and not line.value):
            out.append(shorten(line.label, width), style="bold underline")
        elif line.kind == "item":
            out.append(f"{line.value:>{ITEM_VALUE_CELLS}} ", style="bold")
            out.append(items[line.label])
        else:
            out.append(f"{labels[line.label]:<{label_w}} ", style="bold")
            short = len(line.value) <= value_w
            out.append(f"{line.value:>{value_w}}" if short else line.value)
            room = width - label_w - value_w - 2
            if line.trend is not None and short and room >= MIN_SPARK:
                text, step_s = trend_text(line.trend, room)
                out.append(" " + text)
                caption = f"{step_s} s/column · last {step_s * room} s"
    return out, caption


def _filtered(lines: list[MetricLine], needle: str) -> list[MetricLine]:
    out: list[MetricLine] = []
    heading: MetricLine | None = None
    for line in lines:
        if line.kind == "heading":
            heading = line
        elif line.kind != "item":
            out.append(line)
            heading = None
        elif needle in f"{line.label} {line.value}".lower():
            if heading is not None:
                out.append(heading)
                heading = None
            out.append(line)
    return out


class MetricPanel(Vertical, can_focus=True):
    """A bordered panel of label / value / sparkline lines and lists, and a note saying what is
    missing. Sparklines and list rows fit the panel's width (redrawn on resize); the note wraps."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._lines = Static(classes="metric-lines")
        self._note = Static(classes="metric-note")
        self.vm: PanelVM | None = None
        self.zoomed = False
        self.needle = ""

    def compose(self) -> ComposeResult:
        yield self._lines
        yield self._note

    def on_resize(self, _event) -> None:
        if self.vm is not None:
            self.show(self.vm)

    def show(self, vm: PanelVM, zoomed: bool | None = None, needle: str | None = None) -> None:
        self.vm = vm
        self.zoomed = self.zoomed if zoomed is None else zoomed
        self.needle = self.needle if needle is None else needle
        width = max(20, self.size.width or 36)  # the content area: inside the border and padding
        rows = (self.size.height - (len(vm.note) // width + 1 if vm.note else 0)) if self.has_class("-fill") else 0
        text, caption = panel_lines(vm, width, self.zoomed, self.needle, rows)
        self.border_title = vm.title
        sub = [caption] if caption else []
        if self.needle:
            sub.append(f"filter: {self.needle}")
        if len(vm.more) > max(0, rows - len(vm.lines)) and not self.zoomed:
            sub.append("enter: more")
        self.border_subtitle = " · ".join(sub)
        self._lines.display = bool(text.plain)
        self._lines.update(text)
        self._note.display = bool(vm.note)
        self._note.update(Text(vm.note, style="italic"))

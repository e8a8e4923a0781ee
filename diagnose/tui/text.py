"""Small pure text helpers shared by the adapters: bars, sparklines, names. Numbers with units come
from diagnose/render/units.py, the formatter the report shares."""
from __future__ import annotations

from collections.abc import Sequence

from diagnose.render.units import UNKNOWN, fmt_cell, fmt_value, utc_datetime, utc_time

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
BAR_FULL, BAR_EMPTY = "█", "░"


def bar(pct: float | None, width: int) -> str:
    """A horizontal bar for 0..100 (clamped); ``width`` cells of empty blocks when unknown."""
    if pct is None or width <= 0:
        return BAR_EMPTY * max(0, width)
    filled = round(max(0.0, min(100.0, pct)) / 100.0 * width)
    return BAR_FULL * filled + BAR_EMPTY * (width - filled)


def spark(values: Sequence[float], width: int, hi: float = 100.0) -> str:
    """The last ``width`` values as block characters on a fixed 0..``hi`` scale.

    A fixed scale (unlike a min..max one) keeps 97% vs 98% from looking like a full swing.
    """
    if width <= 0 or hi <= 0:
        return ""
    out = []
    for v in list(values)[-width:]:
        level = max(0.0, min(1.0, v / hi))
        out.append(SPARK_BLOCKS[min(len(SPARK_BLOCKS) - 1, int(level * len(SPARK_BLOCKS)))])
    return "".join(out)


def split_family(name: str) -> tuple[str, str | None]:
    """``cpu.category_share_pct[gc]`` -> (``cpu.category_share_pct``, ``gc``); no key -> None."""
    if name.endswith("]") and "[" in name:
        base, key = name[:-1].split("[", 1)
        return base, key
    return name, None


def humanize(name: str) -> str:
    """``spans.stage_share_pct`` -> ``spans stage share``: a signal family as a panel title."""
    tail = name.replace(".", " ").replace("_", " ")
    for unit in (" pct", " ms", " s", " w"):
        if tail.endswith(unit):
            tail = tail[: -len(unit)]
    return tail


def shorten(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` cells with an ellipsis in the middle (keeps file names)."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


__all__ = ["UNKNOWN", "bar", "fmt_cell", "fmt_value", "humanize", "shorten", "spark", "split_family",
           "utc_datetime", "utc_time"]

"""Small pure text helpers shared by the adapters: numbers with units, bars and sparklines."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Sequence

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
BAR_FULL, BAR_EMPTY = "█", "░"
UNKNOWN = "unknown"


def fmt_value(value: float | None, unit: str) -> str:
    """``value`` with its unit for a terminal cell; None is "unknown", never 0."""
    if value is None:
        return UNKNOWN
    if unit in ("bytes", "bytes/s"):
        for scale, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.1f} {suffix}{'/s' if unit == 'bytes/s' else ''}"
        return f"{value:.0f} {unit}"
    if unit == "%":
        return f"{value:.1f}%"
    if unit in ("ms", "s", "W", "MHz"):
        return f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}".rstrip()


def fmt_cell(value: Any) -> str:
    """A table cell from a JSON-ready value (details tables are lists of plain dicts)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt_cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(fmt_cell(v) for v in value)
    return str(value)


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


def utc_time(ns: int | None) -> str:
    """Unix ns as ``HH:MM:SS UTC``; "?" when absent."""
    if not ns:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%H:%M:%S UTC")


def utc_datetime(ns: int | None) -> str:
    if not ns:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


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

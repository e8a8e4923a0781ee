"""Small pure text helpers shared by the adapters: bars, sparklines, names. Numbers with units come
from diagnose/render/units.py, the formatter the report shares."""
from __future__ import annotations

from collections.abc import Sequence

from diagnose.render.units import UNKNOWN, fmt_cell, fmt_value, printable, utc_datetime, utc_time

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


HISTORY_MIN_S = 60.0
STEPS_S = (1, 2, 3, 5, 10, 15, 30, 60, 120, 300)


def column_step(width: int, bucket_s: float = 1.0, min_span_s: float = HISTORY_MIN_S) -> int:
    """Buckets per sparkline column so that ``width`` columns span at least ``min_span_s``
    seconds: the smallest of STEPS_S (in seconds) that does, in buckets of ``bucket_s``."""
    for step in STEPS_S:
        if step * max(1, width) >= min_span_s:
            return max(1, round(step / bucket_s))
    return max(1, round(STEPS_S[-1] / bucket_s))


def downsample(values: Sequence[float], weights: Sequence[float], step: int, merge: str = "mean") -> list[float]:
    """Consecutive groups of ``step`` values joined, the groups aligned to the newest value (the
    oldest group may be shorter): ``merge`` "mean" is their weighted mean (a group with no weight:
    the plain mean), "max" the largest value with weight (a group with none: the plain largest)."""
    if merge == "max":
        return [max([v for v, w in zip(vs, ws) if w > 0] or vs) for vs, ws in _groups(values, weights, step)]
    return [sum(v * w for v, w in zip(vs, ws)) / sum(ws) if sum(ws) > 0 else sum(vs) / len(vs)
            for vs, ws in _groups(values, weights, step)]


def _groups(values: Sequence[float], weights: Sequence[float],
            step: int) -> list[tuple[Sequence[float], Sequence[float]]]:
    out = []
    n = len(values)
    start = n % step or step if step > 1 else 1
    edges = [0] + list(range(start, n + 1, step)) if step > 1 else list(range(n + 1))
    for lo, hi in zip(edges, edges[1:]):
        out.append((values[lo:hi], weights[lo:hi]))
    return out


def distinct_short(names: Sequence[str], width: int) -> dict[str, str]:
    """Each name cut to ``width`` cells, the cut names still distinct: a name that fits is kept;
    a longer one loses its middle (``preprocess``/``postprocess`` -> ``pre…cess``/``pos…cess``),
    the cut placed so that the part telling it from the others (past their shared prefix or
    before their shared suffix) stays visible, and never equal to another name's."""
    out: dict[str, str] = {}
    taken = {n for n in names if len(n) <= width}
    for name in sorted(set(names), key=lambda n: (len(n) > width, n)):
        if len(name) <= width or width <= 1:
            out[name] = name[:max(0, width)] if len(name) > width else name
            continue
        keep = width - 1
        head = keep // 2
        others = [o for o in names if o != name]
        pre = max((_common(name, o) for o in others), default=0)
        suf = max((_common(name[::-1], o[::-1]) for o in others), default=0)
        heads = sorted(range(keep + 1), key=lambda h: (not (h > pre or keep - h > suf), abs(h - head), -h))
        options = [name[:h] + "…" + (name[len(name) - (keep - h):] if keep - h else "") for h in heads]
        pick = next((o for o in options if o not in taken), None)
        if pick is None:  # every cut is taken: number it
            pick = next(f"{name[:width - len(str(i)) - 1]}…{i}" for i in range(1, len(names) + 2)
                        if f"{name[:width - len(str(i)) - 1]}…{i}" not in taken)
        taken.add(pick)
        out[name] = pick
    return out


def _common(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


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


__all__ = ["UNKNOWN", "bar", "column_step", "distinct_short", "downsample",
           "fmt_cell", "fmt_value", "humanize", "shorten", "spark", "split_family",
           "printable", "utc_datetime", "utc_time"]

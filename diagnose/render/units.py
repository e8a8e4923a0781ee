"""Values with units as text: the one formatter the report, the exports and the TUI share.

None is "unknown", never 0. Durations pick ms from 1 ms on; sizes pick KiB/MiB/GiB (binary).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnose.bundle.records.manifest import TargetInfo

UNKNOWN = "unknown"
_BINARY = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def fmt_value(value: float | None, unit: str) -> str:
    """``value`` in ``unit`` (``%``, ``ms``, ``us``, ``bytes``, ``bytes/s``, ...) as short text."""
    if value is None:
        return UNKNOWN
    if unit in ("bytes", "bytes/s"):
        for scale, suffix in _BINARY:
            if abs(value) >= scale:
                return f"{value / scale:.1f} {suffix}{'/s' if unit == 'bytes/s' else ''}"
        return f"{value:.0f} {unit}"
    if unit == "%":
        return f"{value:.1f}%"
    if unit in ("us", "µs"):
        return fmt_us(value)
    if unit in ("ms", "s", "W", "MHz"):
        return f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}".rstrip()


def fmt_us(us: float | None) -> str:
    """A duration given in µs: ``850 µs``, from 1 ms on ``12.3 ms``."""
    if us is None:
        return UNKNOWN
    return f"{us / 1e3:.1f} ms" if abs(us) >= 1e3 else f"{us:.0f} µs"


def fmt_pct(value: float | None, digits: int = 0, missing: str = "-") -> str:
    """A percentage for a dense table cell (``missing`` where no counter offered it)."""
    return missing if value is None else f"{value:.{digits}f}%"


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


def utc_time(ns: int | None) -> str:
    """Unix ns as ``HH:MM:SS UTC``; "?" when absent."""
    if not ns:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%H:%M:%S UTC")


def utc_datetime(ns: int | None) -> str:
    """Unix ns as ``YYYY-MM-DD HH:MM:SS UTC``; "?" when absent."""
    if not ns:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def utc_clock_ms(ns: int) -> str:
    """Unix ns as ``HH:MM:SS.mmm`` (UTC time of day), for event times in gap tables. Integer
    arithmetic: any int (a hostile trace's) formats, where datetime would overflow."""
    s, frac = divmod(int(ns), 1_000_000_000)
    return f"{(s // 3600) % 24:02d}:{(s // 60) % 60:02d}:{s % 60:02d}.{frac // 1_000_000:03d}"


def bound_words(quadrant: str) -> str:
    """``"io"`` -> ``"IO-bound"``, ``"service"`` -> ``"Service-bound"``: a quadrant as a title says it."""
    return ("IO" if quadrant == "io" else quadrant.capitalize()) + "-bound"


def pid_text(target: TargetInfo) -> str:
    """The manifest's ``target.pid`` as text, "?" when it has none (TargetInfo read a hand-edited
    bundle's pid as None unless it is a positive int: the report's title would render it)."""
    return "?" if target.pid is None else str(target.pid)


# C0/C1 controls, DEL, and the bidirectional overrides and isolates (U+202A-202E, U+2066-2069) that
# reorder what a terminal shows
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROLS.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def printable(text: str) -> str:
    """``text`` with control characters written out as ``\\xNN`` (``\\uNNNN`` for the bidi controls):
    names from the target (its command line, thread names, function names, a server's error) must
    never reach the terminal as escape sequences (a title set, a cleared screen)."""
    return text.translate(_CONTROLS)

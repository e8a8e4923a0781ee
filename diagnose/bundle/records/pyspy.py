"""py-spy's streams: the window index, the source lines, the thread names."""
from __future__ import annotations

from typing import Any

from diagnose.bundle.records.base import Finite, Record


class PyspyWindowRecord(Record):
    """The index record of one py-spy window (collectors/pyspy.py, importers/pyspy_files.py)."""

    window: Finite = 0  # its sequence number (importers may write a float)
    file: str | None = None  # PYSPY_WINDOWS.file(window)
    spawn_ns: int | None = None
    exit_ns: int | None = None
    origin_ns: Any = None  # where the window's ts 0 lies on the Unix clock: see ``origin``
    origin_err_ns: int | None = None  # ...within +- this
    first_ts_us: Finite | None = None  # the first and last event of the window (us from its origin)
    last_ts_us: Finite | None = None
    samples: int | None = None  # py-spy's count: one per thread-stack read
    errors: int | None = None
    returncode: int | None = None
    rate_hz: Finite | None = None  # the rate asked of py-spy for this window
    window_s: Finite | None = None  # the --duration asked
    threads: int | None = None  # (pid, tid) pairs the window sampled
    rate_assumed: bool = False
    ended_by: str | None = None
    blocking: bool = False
    format: str | None = None  # imported: chrometrace, speedscope or raw
    imported_from: str | None = None

    @property
    def origin(self) -> int | None:
        """The Unix origin (ns): an int, or a float such as jq writes, inside the int64 range;
        anything else is unknown (the window's stacks then have no place on the common clock, but
        they still count)."""
        o = self.origin_ns
        if isinstance(o, bool) or not isinstance(o, (int, float)) or not 0 < o < 2**62:
            return None
        return int(o)


class PyspySourceRecord(Record):
    """The source line behind a sampled ``file:line``."""

    file: str
    line: int
    text: str


class ThreadNameRecord(Record):
    """A thread's name as /proc says it, first seen at ``first_seen_ns``."""

    tid: int
    comm: str | None = None
    first_seen_ns: int | None = None


__all__ = ["PyspySourceRecord", "PyspyWindowRecord", "ThreadNameRecord"]

"""Incremental readers of the bundle's JSON Lines streams while the capture writes them."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


class JsonlTail:
    """Yields the records appended to ``path`` since the last call.

    Only complete lines are consumed: a line still being written stays for the next call, so no
    record is skipped or read twice. A missing file yields nothing (the stream may start later).
    ``max_bytes``: read at most this much per call (a flooded stream is caught up over several
    calls instead of holding the capture's GIL for one long parse); ``behind`` says it is.
    """

    def __init__(self, path: Path, max_bytes: int | None = None):
        self.path = path
        self.max_bytes = max_bytes
        self._offset = 0
        self.bad_lines = 0
        self.behind = False
        self._skipping = False  # inside a line longer than max_bytes: dropped, counted in bad_lines

    def read(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read(-1 if self.max_bytes is None else self.max_bytes)
                self.behind = self.max_bytes is not None and len(chunk) == self.max_bytes
        except FileNotFoundError:
            return
        if self._skipping:
            cut = chunk.find(b"\n")
            self._offset += len(chunk) if cut < 0 else cut + 1
            if cut < 0:
                return
            self._skipping, chunk = False, chunk[cut + 1:]
        end = chunk.rfind(b"\n")
        if end < 0:
            if self.behind:  # one line longer than max_bytes: never parsed, skipped to its end
                self._offset += len(chunk)
                self._skipping = True
                self.bad_lines += 1
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(rec, dict):
                yield rec

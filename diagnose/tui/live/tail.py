"""Incremental readers of the bundle's JSON Lines streams while the capture writes them."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlTail:
    """Yields the records appended to ``path`` since the last call.

    Only complete lines are consumed: a line still being written stays for the next call, so no
    record is skipped or read twice. A missing file yields nothing (the stream may start later).
    """

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self.bad_lines = 0

    def read(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(rec, dict):
                yield rec

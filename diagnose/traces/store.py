"""Growing column buffers, split by what the analyzers read.

Rows go straight into three partitions (GPU timeline events, host runtime calls, host ops), each
with only its own columns, in numpy buffers that grow by half: the final arrays are built in
place instead of concatenating per-batch pieces, so peak memory stays near the final size.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from diagnose.traces.schema import (
    CAT_CPU_OP,
    CAT_DRIVER,
    CAT_KERNEL,
    CAT_MEMCPY,
    CAT_MEMSET,
    CAT_RUNTIME,
    CAT_SYNC,
    CAT_USER_ANNOTATION,
    EVENT_COLUMNS,
    Table,
)

_TIMES = ("name", "pid", "tid", "ts", "dur")
# partition -> (categories, columns). Sync events belong to the GPU timeline only with a stream.
PARTITIONS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "gpu": ((CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_SYNC),
            _TIMES + ("cat", "stream", "device", "correlation", "bytes", "coll", "pg", "seq")),
    "runtime": ((CAT_RUNTIME, CAT_DRIVER), _TIMES + ("correlation", "external_id")),
    "cpu": ((CAT_CPU_OP, CAT_USER_ANNOTATION), _TIMES + ("cat", "external_id", "flops", "bytes", "precision", "batch")),
}
GROWTH = 1.5
MIN_CAPACITY = 4096


class GrowingTable:
    def __init__(self, dtypes: dict[str, Any]):
        self.dtypes = dtypes
        self.n = 0
        self.cap = 0
        self.cols: dict[str, np.ndarray] = {k: np.zeros(0, t) for k, t in dtypes.items()}

    def append(self, batch: dict[str, np.ndarray]) -> None:
        m = len(next(iter(batch.values())))
        if self.n + m > self.cap:
            self._grow(max(int(self.cap * GROWTH), self.n + m, MIN_CAPACITY))
        for k in self.dtypes:
            self.cols[k][self.n:self.n + m] = batch[k]
        self.n += m

    def _grow(self, cap: int) -> None:
        for k, t in self.dtypes.items():  # one column at a time: old buffer freed before the next
            new = np.empty(cap, t)
            new[:self.n] = self.cols[k][:self.n]
            self.cols[k] = new
        self.cap = cap

    def finish(self) -> Table:
        """Exact-size columns (copied one at a time); the buffers are released."""
        out = {}
        for k in self.dtypes:
            out[k] = self.cols.pop(k)[:self.n].copy()
        self.n = self.cap = 0
        return Table(out)


class PartitionedStore:
    def __init__(self) -> None:
        self.parts = {name: GrowingTable({c: EVENT_COLUMNS[c] for c in cols})
                      for name, (_, cols) in PARTITIONS.items()}
        self.dropped = 0  # sync events without a stream: not on the GPU timeline (as in HTA)

    def append(self, cols: dict[str, np.ndarray]) -> None:
        cat = cols["cat"]
        for name, (cats, columns) in PARTITIONS.items():
            mask = np.isin(cat, cats)
            if name == "gpu":
                off_stream = (cat == CAT_SYNC) & (cols["stream"] == -1)
                self.dropped += int(off_stream.sum())
                mask &= ~off_stream
            if mask.any():
                self.parts[name].append({c: cols[c][mask] for c in columns})

    def finish(self) -> dict[str, Table]:
        return {name: part.finish() for name, part in self.parts.items()}


__all__ = ["GrowingTable", "PARTITIONS", "PartitionedStore"]

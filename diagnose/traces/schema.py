"""What a Kineto trace becomes: category codes, column dtypes, and the column Table."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Event categories the analyzers read; Kineto spelled some differently in older versions.
CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_RUNTIME, CAT_DRIVER, CAT_SYNC, CAT_CPU_OP, \
    CAT_USER_ANNOTATION, CAT_GPU_USER_ANNOTATION = range(9)
CATEGORY_NAMES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync",
                  "cpu_op", "user_annotation", "gpu_user_annotation")
CAT_CODE: dict[str, int] = {name: i for i, name in enumerate(CATEGORY_NAMES)
                            if i != CAT_GPU_USER_ANNOTATION}  # GPU-side labels: not analysed
CAT_CODE.update({"Kernel": CAT_KERNEL, "Memcpy": CAT_MEMCPY, "Memset": CAT_MEMSET,
                 "Runtime": CAT_RUNTIME, "Driver": CAT_DRIVER, "Operator": CAT_CPU_OP,
                 "cuda_profiler_range": CAT_USER_ANNOTATION})
GPU_CATS = (CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET)
FLOW_CATS = {"ac2g": 0, "async_cpu_to_gpu": 1, "async": 2}
FLOW_START, FLOW_END = 0, 1

EVENT_COLUMNS = {
    "cat": np.int8, "name": np.int32, "pid": np.int64, "tid": np.int64, "ts": np.float64,
    "dur": np.float64, "correlation": np.int64, "external_id": np.int64, "stream": np.int64,
    "device": np.int64, "flops": np.float64, "bytes": np.float64,
    "precision": np.int8,  # op_args.PRECISIONS index, ops with FLOPs only
    "batch": np.int64,  # leading dimension of input 0 of matmul/linear/conv ops (rank >= 2), else -1
    # collective kernels (args "Collective name", "Process Group Name", "Seq"/"seq"): name ids, else -1
    "coll": np.int32, "pg": np.int32, "seq": np.int64,
}
FLOW_COLUMNS = {"id": np.int64, "phase": np.int8, "kind": np.int8, "pid": np.int64, "tid": np.int64,
                "ts": np.float64}


@dataclass
class Table:
    """Columns as numpy arrays (time columns in the trace's own µs, converted later)."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        first = next(iter(self.columns.values()), None)
        return 0 if first is None else len(first)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.columns[key]

    def take(self, rows: np.ndarray, columns: tuple[str, ...] | None = None) -> Table:
        """A copy of the selected rows (mask or indexes), optionally of some columns only."""
        return Table({k: v[rows] for k, v in self.columns.items() if columns is None or k in columns})


__all__ = ["CATEGORY_NAMES", "CAT_CODE", "CAT_CPU_OP", "CAT_DRIVER", "CAT_GPU_USER_ANNOTATION", "CAT_KERNEL",
           "CAT_MEMCPY", "CAT_MEMSET", "CAT_RUNTIME", "CAT_SYNC", "CAT_USER_ANNOTATION", "EVENT_COLUMNS",
           "FLOW_CATS", "FLOW_COLUMNS", "FLOW_END", "FLOW_START", "GPU_CATS", "Table"]

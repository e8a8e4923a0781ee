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
                 "Runtime": CAT_RUNTIME, "Driver": CAT_DRIVER, "Operator": CAT_CPU_OP})
# CUPTI's range profiler (``cuda_profiler_range``): one event per kernel replayed under its counters,
# not a timed kernel activity; counted (ReadReport.profiler_ranges), not analysed.
PROFILER_RANGE_CATS = frozenset({"cuda_profiler_range", "mlu_profiler_range", "gcu_profiler_range"})
# Other vendors' accelerators (Kineto's ActivityType names, libkineto/src/ActivityType.cpp and its
# vendor forks): their device tracks are the GPU timeline, their runtimes the host's launch and sync
# calls. MTIA writes every device event as ``mtia_ccp_events`` (kernels such as "fc-dtype_Float",
# "pe_exe", DMA as "dma_request"; Holistic Trace Analysis reads the category as GPU kernels) and its
# host calls as ``mtia_runtime``; Cambricon MLU and Enflame GCU name their copies and runtimes.
DEVICE_CAT_CODE: dict[str, int] = {
    "mtia_ccp_events": CAT_KERNEL, "mlu_memcpy": CAT_MEMCPY, "mlu_memset": CAT_MEMSET,
    "GCU_MEMCPY": CAT_MEMCPY, "GCU_MEMSET": CAT_MEMSET,
    "mtia_runtime": CAT_RUNTIME, "xpu_runtime": CAT_RUNTIME, "mlu_runtime": CAT_RUNTIME,
    "gcu_runtime": CAT_RUNTIME, "privateuse1_runtime": CAT_RUNTIME,
    "xpu_driver": CAT_DRIVER, "gcu_driver": CAT_DRIVER, "privateuse1_driver": CAT_DRIVER,
    "xpu_sync": CAT_SYNC, "gcu_sync": CAT_SYNC,
}
CAT_CODE.update(DEVICE_CAT_CODE)
# A device track's own waits (MTIA's "event_wait" on another stream, "event_record"): on the timeline
# as sync events, like CUDA's "Stream Wait Event", not as busy time.
DEVICE_WAIT_NAMES = r"^(event_wait|event_record|wait_on_event)$"
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
           "CAT_MEMCPY", "CAT_MEMSET", "CAT_RUNTIME", "CAT_SYNC", "CAT_USER_ANNOTATION", "DEVICE_CAT_CODE",
           "DEVICE_WAIT_NAMES", "EVENT_COLUMNS", "FLOW_CATS", "FLOW_COLUMNS", "FLOW_END", "FLOW_START", "GPU_CATS",
           "PROFILER_RANGE_CATS", "Table"]

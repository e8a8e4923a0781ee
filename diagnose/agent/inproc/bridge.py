"""Mirror OpenTelemetry spans as NVTX ranges and torch.profiler ``record_function`` labels.

With NVTX on, Nsight Systems shows each service stage beside the GPU kernels it launched; with the
torch mirror on (only while a torch profiler window runs), the torch trace carries the stage names
so kernels can be attributed to stages. NVTX ranges are process-wide start/end ranges (domain
"diagnose"), not push/pop, because a span may end on another thread than the one that started it.
Called from the span processor, i.e. the application's threads: never raises. While nothing is
mirrored (no NVTX, no torch window running) the processor calls neither method (``active`` and
``open`` are read as plain attributes, no lock): the lock is taken only by spans that are mirrored.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

MAX_MIRRORED = 10_000  # open mirrored spans; beyond this, new spans are not mirrored
NVTX_DOMAIN = "diagnose"


class Bridge:
    def __init__(self, nvtx_module: Any = None):
        self.nvtx = nvtx_module
        self.active = nvtx_module is not None  # whether a span starting now is mirrored
        self._torch_on = False
        self.on_change: Any = None  # called after ``active`` changed (spans.rebind)
        self.open: dict[int, tuple[Any, Any]] = {}  # span id -> (NVTX handle, record_function): exit() pops
        self._lock = threading.Lock()

    @property
    def torch_on(self) -> bool:
        return self._torch_on

    @torch_on.setter
    def torch_on(self, on: bool) -> None:
        self._torch_on = on
        self.active = self.nvtx is not None or on
        if self.on_change is not None:
            self.on_change()

    def enter(self, span: Any) -> None:
        if len(self.open) >= MAX_MIRRORED or not self.active:
            return
        try:
            handle = self.nvtx.start_range(message=span.name, domain=NVTX_DOMAIN) if self.nvtx else None
            rf = None
            if self.torch_on and "torch" in sys.modules:
                rf = sys.modules["torch"].autograd.profiler.record_function(span.name)
                rf.__enter__()
            with self._lock:
                self.open[span.context.span_id] = (handle, rf)
        except Exception:  # mirroring is best effort; the application's span must go on
            pass

    def exit(self, span: Any) -> None:
        if not self.open:  # nothing mirrored: no lock
            return
        with self._lock:
            handle, rf = self.open.pop(span.context.span_id, (None, None))
        try:
            if rf is not None:
                rf.__exit__(None, None, None)
            if self.nvtx is not None and handle is not None:
                self.nvtx.end_range(handle)
        except Exception:  # best effort, see enter()
            pass

    def close_torch_ranges(self) -> None:
        """End every open record_function range now (called by a torch window's stop, on the
        profiler thread): a range still open when torch finalizes would end into freed memory.
        The spans stay open for NVTX; their later exit finds no torch range."""
        self.torch_on = False
        with self._lock:
            ranges = [(sid, h, rf) for sid, (h, rf) in self.open.items() if rf is not None]
            for sid, handle, _ in ranges:
                if handle is None:
                    del self.open[sid]
                else:
                    self.open[sid] = (handle, None)
        for _, _, rf in ranges:
            try:
                rf.__exit__(None, None, None)
            except Exception:  # best effort, see enter()
                pass

    def reset(self) -> None:
        """After fork: forget the parent's open ranges."""
        self._lock = threading.Lock()
        self.open = {}
        self.torch_on = False


def load_nvtx() -> tuple[Any, str | None]:
    """The ``nvtx`` module, or None and why (not installed in the target)."""
    try:
        import nvtx
    except ImportError:
        return None, "the nvtx package is not installed in the target (pip install nvtx)"
    return nvtx, None

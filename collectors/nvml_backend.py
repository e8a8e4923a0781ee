"""The one narrow interface through which diagnose talks to NVML, and its live implementation.

Every call returns plain JSON-ready data, so a recording of the calls (collectors/nvml_replay.py)
can stand in for the hardware: tests replay readings through this same interface, and
``benchmarks/record_gpu.py`` records real ones. Nothing here changes a GPU setting: only
``nvmlDeviceGet*``/``nvmlGpm*`` read calls are made (no persistence, accounting or clock calls).

A counter a device does not offer is returned under ``unknown`` with its reason (NotSupported,
NoPermission, FunctionNotFound, NotFound...), never as 0. ``pynvml`` comes from the nvidia-ml-py
distribution and is imported lazily, inside the backend.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

NO_GPU_INSTANCE = 0xFFFFFFFF  # NVML's gpuInstanceId for a process outside MIG

# NVML return code -> what it means for a counter (the reason recorded as unknown).
REASONS: dict[int, str] = {
    3: "NotSupported: not offered by this GPU, driver or MIG mode",
    4: "NoPermission: needs root or admin rights",
    6: "NotFound: no sample yet",
    13: "FunctionNotFound: the driver is too old for this call",
    26: "Deprecated: removed from this driver",
}
# Errors that mean the library or driver cannot be used at all.
FATAL = {
    9: "NVIDIA driver not loaded",
    12: "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this host",
    15: "GPU is lost (fell off the bus)",
    18: "NVML library and kernel driver versions differ (reboot or reload the driver)",
}


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message is the reason shown in the report."""


class NvmlBackend(ABC):
    """Read-only NVML access. One instance per collector thread.

    ``open`` raises NvmlUnavailable; the other methods may raise NvmlUnavailable when the GPU
    or driver goes away. Per-counter failures are reported under ``unknown`` instead.
    """

    @abstractmethod
    def open(self) -> dict[str, Any]:
        """Initialise; returns host facts: driver_version, nvml_version, cuda_driver_version, device_count."""

    @abstractmethod
    def devices(self) -> list[dict[str, Any]]:
        """Static facts per GPU: index, uuid, name, pci_bus_id, memory_total_bytes, clock maxima
        (MHz), power_limit_mw, mig_mode, architecture, gpm_supported/gpm_reason, unknown."""

    @abstractmethod
    def processes(self, gpu: int) -> dict[str, Any]:
        """Compute processes on GPU ``gpu``: {"pids": [[pid, used_bytes|None, gpu_instance_id|None]]}
        (host pids, as NVML reports them) or {"unknown": reason}."""

    @abstractmethod
    def read(self, gpu: int, since_us: int) -> dict[str, Any]:
        """One poll of GPU ``gpu``: {"values": {name: number}, "unknown": {name: reason},
        "samples": {name: [[t_us, value], ...]} newer than ``since_us`` (NVML CPU timestamps, µs
        since the Unix epoch), "process_samples": [[pid, t_us, sm_pct, mem_pct], ...]}."""

    @abstractmethod
    def gpm_read(self, gpu: int) -> dict[str, Any]:
        """GPM metrics between this call and the previous one on ``gpu``: {"metrics": {...},
        "unknown": {...}, "interval_ns": n}; {"warming": True} on the first call."""

    @abstractmethod
    def close(self) -> None:
        """Release NVML (and GPM samples)."""


def nvml_reason(exc: Exception) -> str:
    """Reason text for a per-counter NVML error."""
    code = getattr(exc, "value", None)
    fallback = f"NVML error {code}: {exc}"
    return REASONS.get(code, fallback) if isinstance(code, int) else fallback


def _fatal_reason(exc: Exception, fallback: str) -> str:
    """What a fatal NVML error means, else ``fallback``."""
    code = getattr(exc, "value", None)
    return FATAL.get(code, fallback) if isinstance(code, int) else fallback


def is_fatal(exc: Exception) -> bool:
    return getattr(exc, "value", None) in FATAL


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


ARCH_NAMES = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere",
              8: "ada", 9: "hopper", 10: "blackwell"}


class LiveNvmlBackend(NvmlBackend):
    """NVML through nvidia-ml-py (``import pynvml``)."""

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: list[Any] = []
        self._gpm: Any = None

    def open(self) -> dict[str, Any]:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(_fatal_reason(exc, f"nvmlInit failed: {exc}")) from None
        self._nv = pynvml  # from here on close() shuts NVML down again
        try:
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(_fatal_reason(exc, f"cannot list GPUs: {exc}")) from None
        host: dict[str, Any] = {"device_count": count}
        for key, fn in (("driver_version", pynvml.nvmlSystemGetDriverVersion),
                        ("nvml_version", pynvml.nvmlSystemGetNVMLVersion),
                        ("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion)):
            host[key] = self._try(fn, {}, key)
        return host

    def _try(self, fn: Callable[[], Any], unknown: dict[str, str], name: str) -> Any:
        """Call ``fn``; on a per-counter NVML error record the reason and return None."""
        try:
            value = fn()
        except self._nv.NVMLError as exc:
            if is_fatal(exc):
                raise NvmlUnavailable(FATAL[exc.value]) from None
            unknown[name] = nvml_reason(exc)
            return None
        return _text(value) if isinstance(value, bytes) else value

    def devices(self) -> list[dict[str, Any]]:
        return [self._device(i, h) for i, h in enumerate(self._handles)]

    def _device(self, index: int, h: Any) -> dict[str, Any]:
        nv = self._nv
        unknown: dict[str, str] = {}
        dev: dict[str, Any] = {"index": index}
        for key, fn in (
            ("uuid", lambda: nv.nvmlDeviceGetUUID(h)),
            ("name", lambda: nv.nvmlDeviceGetName(h)),
            ("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId)),
            ("memory_total_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).total),
            ("sm_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            ("mem_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("power_limit_mw", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h)),
            ("mig_mode", lambda: bool(nv.nvmlDeviceGetMigMode(h)[0] == nv.NVML_DEVICE_MIG_ENABLE)),
            ("architecture", lambda: ARCH_NAMES.get(nv.nvmlDeviceGetArchitecture(h), "unknown")),
        ):
            dev[key] = self._try(fn, unknown, key)
        from diagnose.collectors.gpm import gpm_support

        dev["gpm_supported"], dev["gpm_reason"] = gpm_support(nv, h, dev)
        dev["unknown"] = unknown
        return dev

    def processes(self, gpu: int) -> dict[str, Any]:
        unknown: dict[str, str] = {}
        procs = self._try(lambda: self._nv.nvmlDeviceGetComputeRunningProcesses(self._handles[gpu]),
                          unknown, "processes")
        if procs is None:
            return {"unknown": unknown["processes"]}
        rows = []
        for p in procs:
            gi = getattr(p, "gpuInstanceId", NO_GPU_INSTANCE)
            rows.append([int(p.pid), p.usedGpuMemory, None if gi in (None, NO_GPU_INSTANCE) else int(gi)])
        return {"pids": rows}

    def read(self, gpu: int, since_us: int) -> dict[str, Any]:
        nv, h = self._nv, self._handles[gpu]
        values: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        util = self._try(lambda: nv.nvmlDeviceGetUtilizationRates(h), unknown, "gpu_util_pct")
        if util is None:
            unknown["mem_util_pct"] = unknown["gpu_util_pct"]
        else:
            values["gpu_util_pct"], values["mem_util_pct"] = util.gpu, util.memory
        mem = self._try(lambda: nv.nvmlDeviceGetMemoryInfo(h), unknown, "mem_used_bytes")
        if mem is not None:
            values["mem_used_bytes"], values["mem_total_bytes"] = mem.used, mem.total
        for key, fn in self._gauges(nv, h):
            v = self._try(fn, unknown, key)
            if v is not None:
                values[key] = v
        return {"values": values, "unknown": unknown, "samples": self._samples(h, since_us, unknown),
                "process_samples": self._process_samples(h, since_us, unknown)}

    def _gauges(self, nv: Any, h: Any) -> tuple[tuple[str, Callable[[], Any]], ...]:
        return (
            ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            ("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("power_mw", lambda: nv.nvmlDeviceGetPowerUsage(h)),
            ("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            ("clock_event_reasons", lambda: self._clock_events(h)),
            # nvmlDeviceGetPcieThroughput: KB/s over a 20 ms window
            ("pcie_tx_bytes_per_s", lambda: 1024 * nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)),
            ("pcie_rx_bytes_per_s", lambda: 1024 * nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)),
        )

    def _clock_events(self, h: Any) -> int:
        nv = self._nv
        try:
            return int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) != nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))  # drivers before R535

    SAMPLE_TYPES = (("gpu_util_pct", "NVML_GPU_UTILIZATION_SAMPLES"),
                    ("mem_util_pct", "NVML_MEMORY_UTILIZATION_SAMPLES"),
                    ("power_mw", "NVML_TOTAL_POWER_SAMPLES"),
                    ("sm_clock_mhz", "NVML_PROCESSOR_CLK_SAMPLES"),
                    ("mem_clock_mhz", "NVML_MEMORY_CLK_SAMPLES"))

    def _samples(self, h: Any, since_us: int, unknown: dict[str, str]) -> dict[str, list[list[float]]]:
        """Drain the driver's own sample buffers (nvmlDeviceGetSamples) newer than ``since_us``."""
        nv, out = self._nv, {}
        for key, const in self.SAMPLE_TYPES:
            try:
                vtype, samples = nv.nvmlDeviceGetSamples(h, getattr(nv, const), since_us)
            except nv.NVMLError as exc:
                if exc.value != nv.NVML_ERROR_NOT_FOUND:  # NotFound: nothing new since since_us
                    unknown[f"samples.{key}"] = nvml_reason(exc)
                continue
            out[key] = [[int(s.timeStamp), _sample_value(s.sampleValue, vtype)] for s in samples]
        return out

    def _process_samples(self, h: Any, since_us: int, unknown: dict[str, str]) -> list[list[int]]:
        nv = self._nv
        try:
            rows = nv.nvmlDeviceGetProcessUtilization(h, since_us)
        except nv.NVMLError as exc:
            if exc.value != nv.NVML_ERROR_NOT_FOUND:
                unknown["process_samples"] = nvml_reason(exc)
            return []
        return [[int(r.pid), int(r.timeStamp), int(r.smUtil), int(r.memUtil)] for r in rows]

    def gpm_read(self, gpu: int) -> dict[str, Any]:
        from diagnose.collectors.gpm import GpmSampler

        if self._gpm is None:
            self._gpm = GpmSampler(self._nv)
        try:
            return self._gpm.read(gpu, self._handles[gpu])
        except self._nv.NVMLError as exc:
            if is_fatal(exc):
                raise NvmlUnavailable(FATAL[exc.value]) from None
            return {"metrics": {}, "unknown": {"gpm": nvml_reason(exc)}, "interval_ns": None}

    def close(self) -> None:
        if self._nv is None:
            return
        if self._gpm is not None:
            self._gpm.free()
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass  # already shut down by the driver; nothing left to release
        self._nv = None


def _sample_value(value: Any, vtype: int) -> float:
    """Pick the member of NVML's c_nvmlValue_t union named by ``vtype`` (NVML_VALUE_TYPE_*)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(value, member.get(vtype, "uiVal")))


def now_us() -> int:
    return time.time_ns() // 1000


__all__ = ["LiveNvmlBackend", "NvmlBackend", "NvmlUnavailable", "is_fatal", "nvml_reason", "now_us"]

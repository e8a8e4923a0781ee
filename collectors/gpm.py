"""GPM collector: GPU Performance Monitoring metrics (Hopper and newer) through NVML.

GPM reports what NVML's ``utilization.gpu`` cannot: how many SMs were busy (SM_UTIL), warp
occupancy, tensor-pipe and DRAM-bandwidth utilisation, each as an average between two samples
taken > 100 ms apart (``nvmlGpmSampleGet`` + ``nvmlGpmMetricsGet``). Metric ids and meanings:
nvidia-ml-py ``NVML_GPM_METRIC_*`` (GRAPHICS_UTIL 1, SM_UTIL 2, SM_OCCUPANCY 3, ANY_TENSOR_UTIL 5,
DRAM_BW_UTIL 10, FP64/FP32/FP16 11/12/13, PCIe TX/RX 20/21 and NVLink RX/TX 60/61 in MiB/s).

Stream GPM (diagnose/bundle/streams.py): one ``{"kind": "device", "gpu", "uuid", "name", "supported", "reason"}`` per
GPU, then ``{"kind": "reading", "t_ns", "gpu", "interval_ns", "metrics": {...}, "unknown": {...}}``
per GPU every ``GPM_PERIOD_S``; ``t_ns`` (Unix ns, this host's clock) ends the averaged interval.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import GPM
from diagnose.collectors.base import CaptureOptions, CollectorError, Probe, ThreadedCollector
from diagnose.collectors.nvml_backend import LiveNvmlBackend, NvmlBackend, NvmlUnavailable, nvml_reason
from diagnose.model import Target

GPM_PERIOD_S = 0.5  # GPM needs > 100 ms between samples; 2 Hz keeps the overhead negligible
MIB = 1 << 20

# (key in GPM stream records, NVML_GPM_METRIC_* constant, factor to the key's unit)
GPM_METRICS: tuple[tuple[str, str, float], ...] = (
    ("graphics_util_pct", "NVML_GPM_METRIC_GRAPHICS_UTIL", 1.0),
    ("sm_util_pct", "NVML_GPM_METRIC_SM_UTIL", 1.0),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),
    ("any_tensor_util_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),
    ("dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),
    ("fp64_util_pct", "NVML_GPM_METRIC_FP64_UTIL", 1.0),
    ("fp32_util_pct", "NVML_GPM_METRIC_FP32_UTIL", 1.0),
    ("fp16_util_pct", "NVML_GPM_METRIC_FP16_UTIL", 1.0),
    ("pcie_tx_bytes_per_s", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB),
    ("pcie_rx_bytes_per_s", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB),
    ("nvlink_tx_bytes_per_s", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB),
    ("nvlink_rx_bytes_per_s", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB),
)
HOPPER_OR_NEWER = ("hopper", "blackwell")


def gpm_support(nv: Any, handle: Any, dev: dict[str, Any]) -> tuple[bool, str | None]:
    """(supported, reason) for one device; ``dev`` holds its name, architecture and MIG mode."""
    arch = dev.get("architecture")
    if arch not in (None, "unknown", *HOPPER_OR_NEWER):
        return False, f"GPM needs Hopper or newer; {dev.get('name') or 'this GPU'} is {arch}"
    if dev.get("mig_mode"):
        return False, "GPU in MIG mode: per-instance GPM (nvmlGpmMigSampleGet) is not collected"
    try:
        supported = bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except nv.NVMLError as exc:
        return False, f"nvmlGpmQueryDeviceSupport: {nvml_reason(exc)}"
    return supported, None if supported else "nvmlGpmQueryDeviceSupport says this GPU has no GPM"


class GpmSampler:
    """Keeps the previous GPM sample per GPU and turns each new one into metrics (live NVML)."""

    def __init__(self, nv: Any):
        self._nv = nv
        self._prev: dict[int, tuple[Any, int]] = {}

    def read(self, gpu: int, handle: Any) -> dict[str, Any]:
        nv = self._nv
        sample = nv.nvmlGpmSampleAlloc()
        try:
            nv.nvmlGpmSampleGet(handle, sample)
        except nv.NVMLError:
            nv.nvmlGpmSampleFree(sample)
            raise
        t_ns = time.monotonic_ns()
        prev = self._prev.get(gpu)
        self._prev[gpu] = (sample, t_ns)
        if prev is None:
            return {"warming": True}
        try:
            out = self._metrics(prev[0], sample)
        finally:
            nv.nvmlGpmSampleFree(prev[0])
        out["interval_ns"] = t_ns - prev[1]
        return out

    def _metrics(self, first: Any, second: Any) -> dict[str, Any]:
        nv = self._nv
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(GPM_METRICS)
        req.sample1, req.sample2 = first, second
        for i, (_, const, _) in enumerate(GPM_METRICS):
            req.metrics[i].metricId = getattr(nv, const)
        nv.nvmlGpmMetricsGet(req)
        metrics, unknown = {}, {}
        for i, (key, _, factor) in enumerate(GPM_METRICS):
            m = req.metrics[i]
            if m.nvmlReturn != 0:
                unknown[key] = nvml_reason(nv.NVMLError(m.nvmlReturn))
            else:
                metrics[key] = float(m.value) * factor
        return {"metrics": metrics, "unknown": unknown}

    def free(self) -> None:
        for sample, _ in self._prev.values():
            try:
                self._nv.nvmlGpmSampleFree(sample)
            except self._nv.NVMLError:
                pass  # the library is going away; nothing else to release
        self._prev.clear()


class GpmCollector(ThreadedCollector):
    """GPM metrics of every GPM-capable GPU (signals pick the target's GPUs by UUID)."""

    name = "gpm"

    def __init__(self, backend_factory: Callable[[], NvmlBackend] = LiveNvmlBackend) -> None:
        super().__init__()
        self._factory = backend_factory
        self._backend: NvmlBackend | None = None
        self._devices: list[dict[str, Any]] = []
        self._records = 0

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        backend = self._factory()
        try:
            backend.open()
            devices = backend.devices()
        except NvmlUnavailable as exc:
            backend.close()
            return Probe(False, f"no NVML: {exc}")
        usable = [d for d in devices if d.get("gpm_supported")]
        if not usable:
            backend.close()
            reasons = "; ".join(f"GPU {d['index']}: {d.get('gpm_reason')}" for d in devices)
            return Probe(False, reasons or "NVML sees no GPU")
        self._backend, self._devices = backend, devices
        return Probe(True)

    def _setup(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self.period_s = max(GPM_PERIOD_S, 1.0 / max(options.gpu_rate_hz, 0.1))
        self._out = bundle.stream(GPM.name)
        self._streams = [GPM.name]
        for d in self._devices:
            self._out.write({"kind": "device", "gpu": d["index"], "uuid": d.get("uuid"),
                             "name": d.get("name"), "supported": bool(d.get("gpm_supported")),
                             "reason": d.get("gpm_reason")})

    def counts(self) -> dict[str, Any]:
        return {"records": self._records}

    def tick(self) -> bool:
        if self._backend is None:
            raise CollectorError("gpm started without a successful probe")
        for d in self._devices:
            if not d.get("gpm_supported"):
                continue
            try:
                res = self._backend.gpm_read(d["index"])
            except NvmlUnavailable as exc:
                raise CollectorError(str(exc)) from None
            if res.get("warming"):
                continue
            self._out.write({"kind": "reading", "t_ns": time.time_ns(), "gpu": d["index"],
                             "interval_ns": res.get("interval_ns"), "metrics": res.get("metrics", {}),
                             "unknown": res.get("unknown", {})})
            self._records += 1
        return True

    def _teardown(self) -> None:
        if self._backend is not None:
            self._backend.close()


__all__ = ["GPM_METRICS", "GpmCollector", "GpmSampler", "gpm_support"]

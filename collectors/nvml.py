"""NVML collector: per-GPU utilisation, memory, clocks, power, temperature, clock-event reasons,
PCIe throughput and the target's per-process SM/memory utilisation, at ``gpu_rate_hz``.

The target's GPUs are those whose compute-process list (nvmlDeviceGetComputeRunningProcesses)
holds the target or one of its descendants. NVML reports host pids, so each process is matched by
every pid it has in the nested pid namespaces (``NSpid`` in /proc/<pid>/status): a target in a
container matches whether diagnose runs inside or outside it, as far as /proc shows the host pid.
When none matches, every GPU is read and the record says why. The list is refreshed every second.

Stream NVML (diagnose/bundle/streams.py; ``kind`` tells the record apart):
- ``host``: driver/NVML/CUDA versions, device_count, and ``clock`` (how times map to Unix ns);
- ``device``: static facts per GPU (uuid, name, memory total, clock maxima, power limit, MIG mode,
  architecture, GPM support) with ``unknown`` {field: reason};
- ``target``: ``gpus`` (indices), ``matched``, ``pids`` {gpu: [[pid, used_bytes, gpu_instance_id]]},
  ``reason`` when falling back to all GPUs; written at start and whenever it changes;
- ``reading``: ``t_ns`` (Unix ns when the poll returned), ``gpu``, ``values`` (utilisation %,
  bytes, MHz, mW, °C, clock-event bitmask, PCIe bytes/s), ``unknown`` {counter: reason},
  ``samples`` {counter: [[t_us, value]]} drained from the driver buffer (nvmlDeviceGetSamples, so
  nothing between polls is lost), ``process_samples`` [[pid, t_us, sm_pct, mem_pct]] of the target.
Never changes a GPU setting.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psutil

from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import NVML
from diagnose.collectors.base import CaptureOptions, CollectorError, Probe, ThreadedCollector
from diagnose.collectors.nvml_backend import LiveNvmlBackend, NvmlBackend, NvmlUnavailable, now_us
from diagnose.model import Target

TARGET_EVERY_S = 1.0
CLOCK_NOTE = ("t_ns: time.time_ns() when the poll returned; samples and process_samples carry "
              "NVML CPU timestamps in microseconds since the Unix epoch (same host clock)")


def nspids(pid: int) -> set[int]:
    """Every pid ``pid`` has in its nested pid namespaces (``NSpid``), or {pid} where unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return {int(p) for p in line.split()[1:]} | {pid}
    except OSError:
        pass  # gone or unreadable: the pid itself is all we know
    return {pid}


def target_pids(pid: int) -> set[int]:
    """The target and its descendants, each under all of its namespace pids."""
    ids = nspids(pid)
    try:
        for child in psutil.Process(pid).children(recursive=True):
            ids |= nspids(child.pid)
    except psutil.Error:
        pass  # the target is gone; the capture notices on its own
    return ids


def match_target(procs: dict[int, dict[str, Any]], pids: set[int]) -> dict[int, list[list[Any]]]:
    """{gpu: the target's rows of its compute-process list} for GPUs that run the target."""
    out = {}
    for gpu, res in procs.items():
        rows = [r for r in res.get("pids", []) if r[0] in pids]
        if rows:
            out[gpu] = rows
    return out


class NvmlCollector(ThreadedCollector):
    name = "nvml"

    def __init__(self, backend_factory: Callable[[], NvmlBackend] = LiveNvmlBackend) -> None:
        super().__init__()
        self._factory = backend_factory
        self._backend: NvmlBackend | None = None
        self._records = 0
        self._target_gpus: list[int] = []

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        backend = self._factory()
        try:
            host = backend.open()
            devices = backend.devices() if host.get("device_count") else []
        except NvmlUnavailable as exc:
            backend.close()
            return Probe(False, str(exc))
        if not devices:
            backend.close()
            return Probe(False, "NVML sees no GPU: check CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES "
                                "or the container's --gpus")
        self._backend, self._host, self._devices = backend, host, devices
        return Probe(True)

    def _setup(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self.period_s = 1.0 / max(options.gpu_rate_hz, 0.1)
        self._pid = target.pid
        self._out = bundle.stream(NVML.name)
        self._streams = [NVML.name]
        self._out.write({"kind": "host", "t_ns": time.time_ns(), **self._host, "clock": CLOCK_NOTE})
        for d in self._devices:
            self._out.write({"kind": "device", "gpu": d["index"], **{k: v for k, v in d.items() if k != "index"}})
        start = now_us()
        self._since = {d["index"]: {"": start} for d in self._devices}
        self._last_target: dict[str, Any] | None = None
        self._next_target = 0.0
        self._pids: set[int] = set()

    def counts(self) -> dict[str, Any]:
        return {"records": self._records, "gpus": len(self._devices), "target_gpus": len(self._target_gpus)}

    def tick(self) -> bool:
        backend = self._backend
        if backend is None:
            raise CollectorError("nvml started without a successful probe")
        try:
            if time.monotonic() >= self._next_target:
                self._refresh_target(backend)
                self._next_target = time.monotonic() + TARGET_EVERY_S
            for gpu in self._target_gpus or [d["index"] for d in self._devices]:
                self._read(backend, gpu)
        except NvmlUnavailable as exc:
            raise CollectorError(str(exc)) from None
        return True

    def _refresh_target(self, backend: NvmlBackend) -> None:
        self._pids = target_pids(self._pid)
        procs = {d["index"]: backend.processes(d["index"]) for d in self._devices}
        matched = match_target(procs, self._pids)
        self._target_gpus = sorted(matched)
        rec: dict[str, Any] = {"gpus": self._target_gpus or [d["index"] for d in self._devices],
                               "matched": bool(matched), "pids": {str(g): r for g, r in matched.items()}}
        if not matched:
            unknown = {g: r["unknown"] for g, r in procs.items() if "unknown" in r}
            rec["reason"] = (f"process lists unreadable ({next(iter(unknown.values()))})" if unknown
                             else f"pid {self._pid} (and children) not among NVML compute processes "
                                  "(no CUDA context yet, or a pid namespace /proc cannot map)")
            rec["reason"] += f": using all {len(self._devices)} GPU(s)"
        if rec != self._last_target:
            self._last_target = rec
            self._out.write({"kind": "target", "t_ns": time.time_ns(), **rec})

    def _read(self, backend: NvmlBackend, gpu: int) -> None:
        seen = self._since[gpu]
        # one since for all counters: the oldest last-seen among counters that produced samples
        res = backend.read(gpu, min((v for k, v in seen.items() if k), default=seen[""]))
        samples = {}
        for key, rows in (res.get("samples") or {}).items():
            last = seen.get(key, seen[""])
            fresh = [r for r in rows if r[0] > last]
            if fresh:
                samples[key] = fresh
                seen[key] = max(r[0] for r in fresh)
        last_p = seen.get("process", seen[""])
        procs = [r for r in res.get("process_samples") or [] if r[1] > last_p]
        if procs:
            seen["process"] = max(r[1] for r in procs)
        self._out.write({
            "kind": "reading", "t_ns": time.time_ns(), "gpu": gpu,
            "values": res.get("values", {}), "unknown": res.get("unknown", {}), "samples": samples,
            "process_samples": [r for r in procs if r[0] in self._pids],
        })
        self._records += 1

    def _teardown(self) -> None:
        if self._backend is not None:
            self._backend.close()


__all__ = ["NvmlCollector", "match_target", "nspids", "target_pids"]

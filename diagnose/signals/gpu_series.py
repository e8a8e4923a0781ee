"""Per-GPU metrics from the NVML and GPM streams, time-weighted over the capture. Pure.

Each reader turns one stream into ``{uuid: {metric_key: Metric}}`` in one shared vocabulary
(``kernel_busy_pct``, ``sm_active_pct``, ``dram_active_pct``...), each value with the exact
counter it came from; diagnose/signals/gpu.py then picks the best source per signal.
Streams: NVML (collectors/nvml.py) and GPM (collectors/gpm.py), read as the typed records of
diagnose/bundle/records/gpu.py (a malformed number or row in a reading costs only itself).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from statistics import median

from diagnose.bundle import Bundle
from diagnose.bundle.records.gpu import (
    GpmDeviceRecord,
    GpmReadingRecord,
    NvmlDeviceRecord,
    NvmlHostRecord,
    NvmlReadingRecord,
    NvmlTargetRecord,
    numbers,
)
from diagnose.bundle.streams import GPM, NVML

MAX_GAP_FACTOR = 5  # a gap longer than 5 typical intervals is missing data, not a long reading
# NVML clock-event reasons that mean the clocks were held down (nvmlClocksEventReason*):
THROTTLE_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
                 0x40: "hw_thermal", 0x80: "hw_power_brake"}
BUSY_UTIL_PCT = 10  # readings with kernels running, for "clock while busy"


@dataclass(frozen=True)
class Metric:
    """One GPU's value of one metric over the capture; ``reason`` says why ``value`` is None."""

    value: float | None
    source: str
    reason: str | None = None


def time_weighted_mean(points: Iterable[tuple[int, float]]) -> float | None:
    """Mean of a step series where each value covers the time since the previous point.

    The first point counts for one typical (median) interval; gaps are capped at
    ``MAX_GAP_FACTOR`` typical intervals. Timestamps in any one unit. None for no points.
    """
    pts = sorted((t, float(v)) for t, v in points if v is not None)
    if not pts:
        return None
    gaps = [b[0] - a[0] for a, b in zip(pts, pts[1:])]
    typical = median(gaps) if gaps else 0
    if typical <= 0:
        return sum(v for _, v in pts) / len(pts)
    weights = [typical] + [min(g, MAX_GAP_FACTOR * typical) for g in gaps]
    total = sum(weights)
    return sum(w * v for w, (_, v) in zip(weights, pts)) / total if total else None


@dataclass
class NvmlData:
    """The NVML stream regrouped: host facts, devices by index, target records, readings per GPU
    (in time order); ``malformed``: the stream's records dropped for their shape."""

    host: NvmlHostRecord | None = None
    devices: dict[int, NvmlDeviceRecord] = field(default_factory=dict)
    targets: list[NvmlTargetRecord] = field(default_factory=list)
    readings: dict[int, list[NvmlReadingRecord]] = field(default_factory=lambda: defaultdict(list))
    malformed: int = 0

    def uuid(self, gpu: int) -> str:
        dev = self.devices.get(gpu)
        return (dev.uuid if dev is not None else None) or f"nvml-gpu-{gpu}"


def read_nvml(bundle: Bundle) -> NvmlData:
    data = NvmlData()
    for rec in bundle.typed(NVML):
        if isinstance(rec, NvmlHostRecord):
            data.host = rec
        elif isinstance(rec, NvmlDeviceRecord):
            data.devices[rec.gpu] = rec
        elif isinstance(rec, NvmlTargetRecord):
            data.targets.append(rec)
        else:
            data.readings[rec.gpu].append(rec)
    data.malformed = bundle.invalid_records.get(NVML.name, 0)
    for rows in data.readings.values():
        rows.sort(key=lambda r: r.t_ns)
    return data


def _series(readings: list[NvmlReadingRecord], key: str) -> tuple[list[tuple[int, float]], str]:
    """Samples drained from the driver buffer when there are any, else the polled values."""
    drained = [(int(t) * 1000, v) for r in readings if key in r.samples for t, v in r.samples[key]]
    if drained:
        return drained, "nvmlDeviceGetSamples"
    return [(r.t_ns, r.values[key]) for r in readings if key in r.values], "polled"


def _unknown_reason(readings: list[NvmlReadingRecord], key: str) -> str:
    return next((r.unknown[key] for r in reversed(readings) if r.unknown.get(key)), "not reported")


def _mean_metric(readings: list[NvmlReadingRecord], key: str, label: str, scale: float = 1.0,
                 ref: float | None = None) -> Metric:
    pts, how = _series(readings, key)
    if ref is not None:
        pts = [(t, 100.0 * v / ref) for t, v in pts]
    value = time_weighted_mean(pts)
    src = f"NVML {label} ({how}, {len(pts)} points)"
    if value is None:
        return Metric(None, src, f"NVML {label}: {_unknown_reason(readings, key)}")
    return Metric(value * scale, src)


def nvml_metrics(data: NvmlData, gpu: int, target_pids: set[int]) -> dict[str, Metric]:
    """NVML-derived metrics of GPU ``gpu`` (``target_pids``: pids whose process samples count)."""
    rows, dev = data.readings.get(gpu, []), data.devices.get(gpu) or NvmlDeviceRecord(gpu=gpu)
    out = {
        "kernel_busy_pct": _mean_metric(rows, "gpu_util_pct", "utilization.gpu"),
        "memory_busy_pct": _mean_metric(rows, "mem_util_pct", "utilization.memory"),
        "pcie_tx_bytes_per_s": _mean_metric(rows, "pcie_tx_bytes_per_s", "PCIe TX throughput"),
        "pcie_rx_bytes_per_s": _mean_metric(rows, "pcie_rx_bytes_per_s", "PCIe RX throughput"),
    }
    limit = dev.power_limit_mw
    out["power_pct_of_limit"] = (_mean_metric(rows, "power_mw", "power draw / enforced limit", ref=limit)
                                 if limit else Metric(None, "NVML power", _dev_reason(dev, "power_limit_mw")))
    out["sm_clock_pct_of_max"] = _clock_metric(rows, dev)
    out["throttled_share_pct"] = _throttle_metric(rows)
    out["mem_used_max_pct"] = _max_metric(rows, _mem_used_pct, "memory used / total")
    out["temp_c"] = _max_metric(rows, lambda v: v["temp_c"] if "temp_c" in v else None, "temperature (max)")
    out["target_sm_util_pct"] = _process_metric(rows, target_pids)
    if dev.mig_mode:  # NVML answers NotSupported for whole-device counters under MIG
        out = {k: m if m.value is not None else Metric(None, m.source, f"GPU in MIG mode: {m.reason}")
               for k, m in out.items()}
    return out


def _mem_used_pct(v: dict[str, float]) -> float | None:
    """Memory used / total (%) of one reading's values; None without both (or with a zero total)."""
    if "mem_used_bytes" in v and "mem_total_bytes" in v and v["mem_total_bytes"]:
        return 100.0 * v["mem_used_bytes"] / v["mem_total_bytes"]
    return None


def _dev_reason(dev: NvmlDeviceRecord, key: str) -> str:
    return f"NVML {key}: {dev.unknown[key] if key in dev.unknown else 'not reported'}"


def _clock_metric(rows: list[NvmlReadingRecord], dev: NvmlDeviceRecord) -> Metric:
    top = dev.sm_clock_max_mhz
    if not top:
        return Metric(None, "NVML SM clock", _dev_reason(dev, "sm_clock_max_mhz"))
    busy = [r for r in rows if "gpu_util_pct" in r.values and r.values["gpu_util_pct"] >= BUSY_UTIL_PCT] or (
        [r for r in rows if "gpu_util_pct" not in r.values])  # MIG: no utilisation, use all
    pts = [(r.t_ns, 100.0 * r.values["sm_clock_mhz"] / top) for r in busy if "sm_clock_mhz" in r.values]
    value = time_weighted_mean(pts)
    src = f"NVML SM clock / max {top} MHz while kernels run ({len(pts)} readings)"
    return Metric(value, src, None if value is not None else "the GPU ran no kernels during the capture")


def _throttle_metric(rows: list[NvmlReadingRecord]) -> Metric:
    pts = [(r.t_ns, 100.0 if int(r.values["clock_event_reasons"]) & sum(THROTTLE_BITS) else 0.0)
           for r in rows if "clock_event_reasons" in r.values]
    value = time_weighted_mean(pts)
    src = "NVML clock-event reasons (power cap, thermal, HW slowdown, power brake)"
    why = None if value is not None else f"NVML clock events: {_unknown_reason(rows, 'clock_event_reasons')}"
    return Metric(value, src, why)


def throttle_breakdown(rows: list[NvmlReadingRecord]) -> dict[str, float]:
    """Share of readings (%) in which each throttle reason was active."""
    vals = [int(r.values["clock_event_reasons"]) for r in rows if "clock_event_reasons" in r.values]
    if not vals:
        return {}
    return {name: round(100.0 * sum(1 for v in vals if v & bit) / len(vals), 1)
            for bit, name in THROTTLE_BITS.items()}


def _max_metric(rows: list[NvmlReadingRecord], fn: Callable[[dict[str, float]], float | None], label: str) -> Metric:
    vals = [x for x in (fn(r.values) for r in rows if r.values) if x is not None]
    if not vals:
        return Metric(None, f"NVML {label}", f"NVML {label}: not reported")
    return Metric(max(vals), f"NVML {label} ({len(vals)} readings)")


def _process_metric(rows: list[NvmlReadingRecord], pids: set[int]) -> Metric:
    by_t: dict[int, float] = defaultdict(float)
    for r in rows:
        for pid, t_us, sm, _mem in r.process_samples:
            if pid in pids:
                by_t[int(t_us) * 1000] += sm
    value = time_weighted_mean(by_t.items())
    src = f"NVML per-process SM utilisation of the target (nvmlDeviceGetProcessUtilization, {len(by_t)} samples)"
    why = next((r.unknown["process_samples"] for r in rows if "process_samples" in r.unknown),
               "no per-process samples for the target's pids")
    return Metric(value, src, None if value is not None else f"NVML: {why}")


# GPM metric key in GPM records -> (metric key, GPM name for the source string)
GPM_KEYS = {
    "graphics_util_pct": ("gr_engine_active_pct", "GRAPHICS_UTIL"),
    "sm_util_pct": ("sm_active_pct", "SM_UTIL"),
    "sm_occupancy_pct": ("sm_occupancy_pct", "SM_OCCUPANCY"),
    "any_tensor_util_pct": ("tensor_active_pct", "ANY_TENSOR_UTIL"),
    "dram_bw_util_pct": ("dram_active_pct", "DRAM_BW_UTIL"),
    "fp16_util_pct": ("fp16_active_pct", "FP16_UTIL"),
    "fp32_util_pct": ("fp32_active_pct", "FP32_UTIL"),
    "fp64_util_pct": ("fp64_active_pct", "FP64_UTIL"),
    "pcie_tx_bytes_per_s": ("pcie_tx_bytes_per_s", "PCIE_TX_PER_SEC"),
    "pcie_rx_bytes_per_s": ("pcie_rx_bytes_per_s", "PCIE_RX_PER_SEC"),
    "nvlink_tx_bytes_per_s": ("nvlink_tx_bytes_per_s", "NVLINK_TOTAL_TX_PER_SEC"),
    "nvlink_rx_bytes_per_s": ("nvlink_rx_bytes_per_s", "NVLINK_TOTAL_RX_PER_SEC"),
}


@dataclass
class GpmData:
    devices: dict[str, GpmDeviceRecord] = field(default_factory=dict)  # by uuid
    readings: dict[str, list[GpmReadingRecord]] = field(default_factory=lambda: defaultdict(list))


def read_gpm(bundle: Bundle) -> GpmData:
    """The GPM stream by GPU uuid; a reading counts once its GPU's device record came before it."""
    data, uuid_of = GpmData(), {}
    for rec in bundle.typed(GPM):
        if isinstance(rec, GpmDeviceRecord):
            uuid = rec.uuid or f"nvml-gpu-{rec.gpu}"
            uuid_of[rec.gpu] = uuid
            data.devices[uuid] = rec
        elif rec.gpu in uuid_of:
            data.readings[uuid_of[rec.gpu]].append(rec)
    return data


def gpm_metrics(data: GpmData, uuid: str) -> tuple[dict[str, Metric], str | None]:
    """GPM metrics of one GPU, or ({}, reason) where GPM has nothing for it."""
    dev = data.devices.get(uuid)
    if dev is None:
        return {}, None
    if not dev.supported:
        return {}, dev.reason or "GPM not supported"
    rows = data.readings.get(uuid, [])
    if not rows:
        return {}, "no GPM interval completed during the capture"
    out = {}
    for gkey, (mkey, gname) in GPM_KEYS.items():
        pts = [(r.t_ns, r.metrics[gkey]) for r in rows if gkey in r.metrics]
        value = time_weighted_mean(pts)
        src = f"GPM {gname} (nvmlGpmMetricsGet, {len(pts)} intervals)"
        why = next((r.unknown[gkey] for r in rows if gkey in r.unknown), "not reported")
        out[mkey] = Metric(value, src, None if value is not None else f"GPM {gname}: {why}")
    return out, None


__all__ = ["GpmData", "Metric", "NvmlData", "gpm_metrics", "numbers", "nvml_metrics", "read_gpm", "read_nvml",
           "throttle_breakdown", "time_weighted_mean"]

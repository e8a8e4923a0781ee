"""Per-GPU metrics from the DCGM stream (collectors/dcgm.py), time-weighted. Pure.

An entity is a GPU (no ``gpu_instance_id``) or a MIG instance of one. Profiling counters of a
partitioned GPU describe the target only through its own instance: when the target's instance is
not known (NVML tells it through the process's gpuInstanceId) they are unknown, with that reason.
Records: diagnose/bundle/records/gpu.py (DcgmRecord; an entity's values are its numeric ones).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from diagnose.bundle import Bundle
from diagnose.bundle.records.gpu import DcgmEntity, DcgmErrorRecord, DcgmSourceRecord
from diagnose.bundle.streams import DCGM
from diagnose.catalogs.dcgm_fields import BY_KEY
from diagnose.results.details import MigInstance
from diagnose.signals.gpu_series import Metric, time_weighted_mean

# DCGM record key -> metric key (shared vocabulary of gpu_series.py)
MEAN_KEYS = {
    "gpu_util_pct": "kernel_busy_pct", "mem_copy_util_pct": "memory_busy_pct",
    "gr_engine_active_pct": "gr_engine_active_pct", "sm_active_pct": "sm_active_pct",
    "sm_occupancy_pct": "sm_occupancy_pct", "tensor_active_pct": "tensor_active_pct",
    "dram_active_pct": "dram_active_pct", "fp16_active_pct": "fp16_active_pct",
    "fp32_active_pct": "fp32_active_pct", "fp64_active_pct": "fp64_active_pct",
    "pcie_tx_bytes_per_s": "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s": "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s": "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s": "nvlink_rx_bytes_per_s",
}
PROFILING = {k for k, f in BY_KEY.items() if f.names[0].startswith("DCGM_FI_PROF_")}
OFF_BY_DEFAULT = {"sm_active_pct", "sm_occupancy_pct", "fp16_active_pct", "fp32_active_pct",
                  "fp64_active_pct", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"}

EntityKey = tuple[str, str | None]  # (uuid, gpu_instance_id)


@dataclass
class DcgmData:
    source: DcgmSourceRecord | None = None
    scrapes: int = 0
    errors: list[str] = field(default_factory=list)
    series: dict[EntityKey, list[tuple[int, DcgmEntity]]] = field(default_factory=lambda: defaultdict(list))

    def label(self) -> str:
        mode = self.source.mode if self.source is not None else None
        url = self.source.url if self.source is not None else None
        return f"{'DCGM' if mode is None else mode} {url or ''}".strip()

    def instances(self, uuid: str) -> list[str]:
        return sorted(gi for u, gi in self.series if u == uuid and gi is not None)


def read_dcgm(bundle: Bundle) -> DcgmData:
    data = DcgmData()
    for rec in bundle.typed(DCGM):
        if isinstance(rec, DcgmSourceRecord):
            data.source = rec
        elif isinstance(rec, DcgmErrorRecord):
            data.errors.append(str(rec.reason))
        else:
            data.scrapes += 1
            for ent in rec.entities:  # filed under (uuid, GPU_I_ID)
                data.series[(ent.uuid or f"dcgm-gpu-{ent.gpu}", ent.gpu_instance_id)].append((rec.t_ns, ent))
    return data


def dcgm_gpus(data: DcgmData) -> dict[str, DcgmEntity]:
    """{uuid: latest whole-GPU entity (or first instance where no whole-GPU entity exists)}."""
    out: dict[str, DcgmEntity] = {}
    for (uuid, _gi), rows in sorted(data.series.items(), key=lambda kv: kv[0][1] is not None):
        out.setdefault(uuid, rows[-1][1])
    return out


def _field_names(key: str) -> str:
    return " / ".join(BY_KEY[key].names)


def _absent_reason(data: DcgmData, key: str, mig: bool) -> str:
    why = f"{data.label()} does not export {_field_names(key)}"
    if mig and key in ("gpu_util_pct", "mem_copy_util_pct"):
        return why + " (no device-level utilisation for a GPU in MIG mode)"
    if key in OFF_BY_DEFAULT:
        return why + " (off in dcgm-exporter's default counters; enable it in its counters CSV)"
    return why


def _mig_reason(uuid: str, data: DcgmData) -> str:
    parts = []
    for gi in data.instances(uuid):
        prof = data.series[(uuid, gi)][-1][1].gpu_instance_profile
        parts.append(f"{gi} ({prof})" if prof else gi)
    return (f"GPU {uuid} is split into MIG instances (GPU_I_ID {', '.join(parts)}) and the target's "
            "instance is unknown (NVML shows it): whole-GPU profiling counters do not describe the "
            "target; per-instance values are in the GPU table")


def entity_metric(data: DcgmData, rows: list[tuple[int, DcgmEntity]], key: str, mig: bool) -> Metric:
    """Time-weighted value of ``key`` over one entity's scrapes."""
    pts = [(t, ent.values[key]) for t, ent in rows if key in ent.values]
    name = next((ent.names[key] for _, ent in rows if key in ent.names), _field_names(key))
    factor = " x100" if BY_KEY[key].factor == 100.0 else ""
    src = f"DCGM {name}{factor} ({data.label()}, {len(pts)} scrapes)"
    if pts:
        return Metric(time_weighted_mean(pts), src)
    blank = next((ent.unknown[key] for _, ent in reversed(rows) if key in ent.unknown), None)
    return Metric(None, src, f"DCGM {name}: {blank}" if blank else _absent_reason(data, key, mig))


def dcgm_metrics(data: DcgmData, uuid: str, target_gi: str | None,
                 power_limit_w: float | None) -> tuple[dict[str, Metric], str | None]:
    """DCGM metrics of one GPU, or ({}, reason) where the scrape has no such GPU."""
    whole = data.series.get((uuid, None), [])
    instances = data.instances(uuid)
    if not whole and not instances:
        return {}, f"GPU {uuid} not in the DCGM data" if data.scrapes else None
    mig = bool(instances)
    chosen = data.series.get((uuid, target_gi)) if target_gi in instances else None
    out: dict[str, Metric] = {}
    for key, mkey in MEAN_KEYS.items():
        if key in PROFILING and mig:
            out[mkey] = (entity_metric(data, chosen, key, mig) if chosen
                         else Metric(None, f"DCGM {_field_names(key)}", _mig_reason(uuid, data)))
        else:
            out[mkey] = entity_metric(data, whole, key, mig)
    out.update(_derived(data, whole, power_limit_w))
    return out, None


def _derived(data: DcgmData, rows: list[tuple[int, DcgmEntity]], power_limit_w: float | None) -> dict[str, Metric]:
    out = {}
    temps = [ent.values["temp_c"] for _, ent in rows if "temp_c" in ent.values]
    out["temp_c"] = Metric(max(temps) if temps else None, f"DCGM GPU temperature (max, {data.label()})",
                           None if temps else _absent_reason(data, "temp_c", False))
    used = [100.0 * v["fb_used_mib"] / (v["fb_used_mib"] + v["fb_free_mib"]) for _, e in rows
            for v in [e.values] if "fb_used_mib" in v and "fb_free_mib" in v and v["fb_free_mib"]]
    out["mem_used_max_pct"] = Metric(max(used) if used else None, "DCGM FB_USED / (FB_USED + FB_FREE)",
                                     None if used else _absent_reason(data, "fb_used_mib", False))
    pts = []
    for t, ent in rows:
        v = ent.values
        limit = v.get("power_limit_w") or power_limit_w
        if "power_w" in v and limit:
            pts.append((t, 100.0 * v["power_w"] / limit))
    value = time_weighted_mean(pts)
    why = None if value is not None else ("no power limit: neither DCGM nor NVML reported one"
                                          if any("power_w" in e.values for _, e in rows)
                                          else _absent_reason(data, "power_w", False))
    out["power_pct_of_limit"] = Metric(value, f"DCGM power draw / limit ({data.label()})", why)
    return out


def mig_table(data: DcgmData) -> tuple[MigInstance, ...]:
    """Per MIG instance: its profile and time-weighted profiling values (for the report)."""
    rows = []
    for (uuid, gi), series in sorted(data.series.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        if gi is None:
            continue
        vals = {MEAN_KEYS[k]: round(m.value, 2) for k in PROFILING & set(MEAN_KEYS)
                for m in [entity_metric(data, series, k, True)] if m.value is not None}
        rows.append(MigInstance(uuid=uuid, gpu_instance_id=gi, profile=series[-1][1].gpu_instance_profile,
                                values=vals))
    return tuple(rows)


__all__ = ["DcgmData", "dcgm_gpus", "dcgm_metrics", "mig_table", "read_dcgm"]

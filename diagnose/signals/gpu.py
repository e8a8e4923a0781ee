"""GPU signal source: NVML, GPM and DCGM streams -> ``gpu.*`` signals for the target's GPUs. Pure.

Every signal is time-weighted over the capture per GPU, then combined over the target's GPUs
(mean for activity percentages, sum for bandwidths, max for temperature and memory). For each
signal the best source that has a value wins, in the order given in ``SIGNALS`` (DCGM and GPM
profiling counters over NVML), and ``Signal.source`` names the exact counter. NVML's
``utilization.gpu`` is reported as ``gpu.kernel_busy_pct`` (a kernel was running), never as SM
activity. The target's GPUs come from NVML's compute-process lists (collectors/nvml.py); without
them every GPU seen counts, and the source says so.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from diagnose.bundle import Bundle, BundleError
from diagnose.catalogs.gpu_specs import GPU_SPECS, OVERRIDE_FILE, SpecError, find_spec, parse_overrides
from diagnose.model import Signal, missing
from diagnose.results.details import Details, GpuDevice
from diagnose.results.quality import DataQuality, GpuQuality
from diagnose.signals.base import SourceResult, collector_reason
from diagnose.signals.gpu_dcgm import DcgmData, dcgm_gpus, dcgm_metrics, mig_table, read_dcgm
from diagnose.signals.gpu_series import (
    GpmData,
    Metric,
    NvmlData,
    gpm_metrics,
    nvml_metrics,
    read_gpm,
    read_nvml,
    throttle_breakdown,
)
from diagnose.signals.params import DEFAULT_PARAMS, AnalysisParams


def MEAN(xs: list[float]) -> float:  # noqa: N802 - reads like max/sum in the table below
    return sum(xs) / len(xs)


@dataclass(frozen=True)
class GpuSignal:
    name: str
    key: str  # metric key shared by the readers
    unit: str
    combine: Callable[[list[float]], float]
    sources: tuple[str, ...]  # best first


PROF = ("dcgm", "gpm")
SIGNALS: tuple[GpuSignal, ...] = (
    GpuSignal("gpu.sm_active_pct", "sm_active_pct", "%", MEAN, PROF),
    GpuSignal("gpu.gr_engine_active_pct", "gr_engine_active_pct", "%", MEAN, PROF),
    GpuSignal("gpu.sm_occupancy_pct", "sm_occupancy_pct", "%", MEAN, PROF),
    GpuSignal("gpu.tensor_active_pct", "tensor_active_pct", "%", MEAN, PROF),
    GpuSignal("gpu.dram_active_pct", "dram_active_pct", "%", MEAN, PROF),
    GpuSignal("gpu.fp16_active_pct", "fp16_active_pct", "%", MEAN, PROF),
    GpuSignal("gpu.fp32_active_pct", "fp32_active_pct", "%", MEAN, PROF),
    # utilization.gpu/.memory: NVML's own 10 Hz samples beat dcgm-exporter's copy of the same counter
    GpuSignal("gpu.kernel_busy_pct", "kernel_busy_pct", "%", MEAN, ("nvml", "dcgm")),
    GpuSignal("gpu.memory_busy_pct", "memory_busy_pct", "%", MEAN, ("nvml", "dcgm")),
    GpuSignal("gpu.target_sm_util_pct", "target_sm_util_pct", "%", MEAN, ("nvml",)),
    GpuSignal("gpu.power_pct_of_limit", "power_pct_of_limit", "%", MEAN, ("nvml", "dcgm")),
    GpuSignal("gpu.sm_clock_pct_of_max", "sm_clock_pct_of_max", "%", MEAN, ("nvml",)),
    GpuSignal("gpu.throttled_share_pct", "throttled_share_pct", "%", MEAN, ("nvml",)),
    GpuSignal("gpu.mem_used_max_pct", "mem_used_max_pct", "%", max, ("nvml", "dcgm")),
    GpuSignal("gpu.temp_max_c", "temp_c", "degC", max, ("nvml", "dcgm")),
    GpuSignal("gpu.pcie_tx_bytes_per_s", "pcie_tx_bytes_per_s", "bytes/s", sum, ("dcgm", "gpm", "nvml")),
    GpuSignal("gpu.pcie_rx_bytes_per_s", "pcie_rx_bytes_per_s", "bytes/s", sum, ("dcgm", "gpm", "nvml")),
    GpuSignal("gpu.nvlink_tx_bytes_per_s", "nvlink_tx_bytes_per_s", "bytes/s", sum, PROF),
    GpuSignal("gpu.nvlink_rx_bytes_per_s", "nvlink_rx_bytes_per_s", "bytes/s", sum, PROF),
)
# Reported (as unknown, with the reason) even when no GPU counter exists at all: the ones the
# GPU rules read, so each of those rules is "not judged" for that one reason.
CORE = ("gpu.sm_active_pct", "gpu.dram_active_pct", "gpu.tensor_active_pct", "gpu.kernel_busy_pct",
        "gpu.gr_engine_active_pct", "gpu.throttled_share_pct")


@dataclass
class Scope:
    """The GPUs the signals describe and how they were chosen."""

    uuids: list[str] = field(default_factory=list)
    label: str = ""
    names: dict[str, str] = field(default_factory=dict)
    indices: dict[str, Any] = field(default_factory=dict)
    instance: dict[str, str] = field(default_factory=dict)  # uuid -> target's MIG GPU_I_ID
    pids: set[int] = field(default_factory=set)


def target_scope(nv: NvmlData, gpm: GpmData, dc: DcgmData) -> Scope:
    s = Scope()
    for g, d in nv.devices.items():
        s.names[nv.uuid(g)], s.indices[nv.uuid(g)] = d.name or "?", g
    for uuid, ent in dcgm_gpus(dc).items():
        s.names.setdefault(uuid, ent.model or "?")
        s.indices.setdefault(uuid, ent.gpu)
    matched = sorted({g for t in nv.targets if t.matched for g in t.gpus})
    if matched:
        s.uuids = [nv.uuid(g) for g in matched]
        s.label = f"target's GPU {', '.join(map(str, matched))} (NVML compute processes)"
        for t in nv.targets:
            for g, rows in t.pids.items():
                s.pids |= {r.pid for r in rows}
                s.instance.update({nv.uuid(g): str(r.gpu_instance_id) for r in rows if r.gpu_instance_id is not None})
    elif nv.devices:
        s.uuids = [nv.uuid(g) for g in sorted(nv.devices)]
        why = next((t.reason for t in reversed(nv.targets) if t.reason), "target not located")
        s.label = f"all {len(s.uuids)} GPU(s): {why}"
    elif dc.scrapes:
        s.uuids = sorted(dcgm_gpus(dc))
        s.label = f"all {len(s.uuids)} GPU(s) in the DCGM data (no NVML here to tell the target's)"
    else:
        s.uuids = sorted(gpm.devices)
        s.label = f"all {len(s.uuids)} GPU(s) GPM saw"
    return s


def _source_reasons(bundle: Bundle, nv: NvmlData, gpm: GpmData, dc: DcgmData) -> dict[str, str]:
    """Why a whole source has nothing (empty when it has data)."""
    out = {}
    if not nv.readings:
        out["nvml"] = collector_reason(bundle, "nvml")
    if not gpm.devices:
        out["gpm"] = collector_reason(bundle, "gpm")
    if not dc.scrapes:
        out["dcgm"] = collector_reason(bundle, "dcgm")
    return out


# Why one GPU has nothing from a source that has data (a source with none says why in its place).
NOT_SEEN = {"nvml": "GPU not seen by NVML", "gpm": "GPU not seen by GPM", "dcgm": "GPU not in the DCGM data"}


def _per_source(uuid: str, scope: Scope, nv: NvmlData, gpm: GpmData, dc: DcgmData,
                base: dict[str, str]) -> dict[str, tuple[dict[str, Metric], str | None]]:
    why = {**NOT_SEEN, **base}
    idx = next((g for g in nv.devices if nv.uuid(g) == uuid), None)
    nvml = (nvml_metrics(nv, idx, scope.pids), None) if idx is not None else ({}, why["nvml"])
    gm, gr = gpm_metrics(gpm, uuid)
    limit = nv.devices[idx].power_limit_mw if idx is not None else None
    dm, dr = dcgm_metrics(dc, uuid, scope.instance.get(uuid), limit / 1000 if limit else None)
    return {"nvml": nvml, "gpm": (gm, gr or why["gpm"]), "dcgm": (dm, dr or why["dcgm"])}


def pick(spec: GpuSignal, per_source: dict[str, tuple[dict[str, Metric], str | None]]) -> Metric:
    """The first source in ``spec.sources`` with a value; else every source's reason."""
    reasons: dict[str, str | None] = {}
    for src in spec.sources:
        metrics, why = per_source[src]
        m = metrics.get(spec.key)
        if m is not None and m.value is not None:
            return m
        reasons[src] = m.reason if m is not None else why
    return Metric(None, "/".join(spec.sources), compose(reasons))


def combine(spec: GpuSignal, picks: dict[str, Metric], scope: Scope) -> Signal:
    known = [(m.value, m.source) for m in picks.values() if m.value is not None]
    if not known:
        first = next(iter(picks.values()))
        return missing(spec.name, spec.unit, first.source, first.reason or "unknown")
    part = f"; {len(known)} of {len(picks)} GPUs" if len(known) < len(picks) else ""
    return Signal(spec.name, spec.combine([v for v, _ in known]), spec.unit,
                  f"{known[0][1]}; {scope.label}{part}")


def _clean(src: str, reason: str | None) -> str:
    """A source's reason without the repeats collector_reason adds ("gpm unavailable: no NVML: ...")."""
    return (reason or "unknown").removeprefix(f"{src} unavailable: ").removeprefix("no NVML: ")


def compose(reasons: Mapping[str, str | None]) -> str:
    """"nvml/gpm: <reason>; dcgm: <reason>": one entry per distinct reason."""
    groups: dict[str, list[str]] = {}
    for src, why in reasons.items():
        groups.setdefault(_clean(src, why), []).append(src)
    return "; ".join(f"{'/'.join(srcs)}: {why}" for why, srcs in groups.items())


def _unavailable(reasons: dict[str, str]) -> dict[str, Signal]:
    why = "GPU counters unavailable: " + compose(reasons)
    return {n: missing(n, "%", "NVML/GPM/DCGM", why) for n in CORE}


def roofline(bundle: Bundle, scope: Scope, dram: Signal | None) -> dict[str, Signal]:
    """Peak FLOP/s, bandwidth, ridge point of the target's GPU model, and DRAM bytes/s estimate."""
    names = ("gpu.peak_bf16_flops_per_s", "gpu.peak_mem_bytes_per_s", "gpu.ridge_flop_per_byte",
             "gpu.dram_bytes_per_s_est")
    units = ("FLOP/s", "bytes/s", "FLOP/byte", "bytes/s")
    model = scope.names.get(scope.uuids[0], "?")
    try:
        specs = (parse_overrides(bundle.read_json(OVERRIDE_FILE)) if bundle.has(OVERRIDE_FILE) else ()) + GPU_SPECS
    except (SpecError, BundleError) as exc:
        return {n: missing(n, u, "catalogs/gpu_specs.py", str(exc)) for n, u in zip(names, units)}
    spec = find_spec(model, specs)
    if spec is None:
        why = f"no roofline data for {model!r}: add a row to {OVERRIDE_FILE} in the bundle"
        return {n: missing(n, u, "catalogs/gpu_specs.py", why) for n, u in zip(names, units)}
    src = f"catalogs/gpu_specs.py {spec.model}: {spec.source}"
    out = {names[0]: Signal(names[0], spec.dense_bf16_flops_per_s, units[0], src),
           names[1]: Signal(names[1], spec.mem_bytes_per_s, units[1], src),
           names[2]: Signal(names[2], spec.ridge_flop_per_byte, units[2], src + "; peak FLOP/s / bytes/s")}
    if dram is not None and dram.value is not None:
        out[names[3]] = Signal(names[3], dram.value / 100.0 * spec.mem_bytes_per_s, units[3],
                               f"gpu.dram_active_pct x {spec.model} peak bandwidth, per GPU")
    else:
        why = (dram.reason if dram else None) or "no DRAM activity"
        out[names[3]] = missing(names[3], units[3], "gpu.dram_active_pct", why)
    return out


def _device_rows(scope: Scope, picks: dict[str, dict[str, Metric]], nv: NvmlData) -> tuple[GpuDevice, ...]:
    rows = []
    for uuid in sorted(picks, key=lambda u: str(scope.indices.get(u))):
        vals = {name: round(m.value, 2) for name, m in picks[uuid].items() if m.value is not None}
        idx = scope.indices.get(uuid)
        rows.append(GpuDevice(
            gpu=idx, uuid=uuid, name=scope.names.get(uuid), target=uuid in scope.uuids, values=vals,
            sources={n: m.source.split(" (")[0] for n, m in picks[uuid].items() if m.value is not None},
            throttle_share_pct=throttle_breakdown(nv.readings.get(idx, [])) if isinstance(idx, int) else {}))
    return tuple(rows)


def _quality(label: str, nv: NvmlData, gpm: GpmData, dc: DcgmData) -> GpuQuality:
    rows = [r for rs in nv.readings.values() for r in rs]
    lags = [r.t_ns / 1e3 - max(t for s in r.samples.values() for t, _ in s) for r in rows if any(r.samples.values())]
    gaps = [(b.t_ns - a.t_ns) / 1e6 for rs in nv.readings.values() for a, b in zip(rs, rs[1:])]
    return GpuQuality(
        counters=label, nvml_readings=len(rows), nvml_malformed_records=nv.malformed,
        nvml_poll_interval_ms_median=round(median(gaps), 1) if gaps else None,
        nvml_newest_sample_age_ms_median=round(median(lags) / 1e3, 1) if lags else None,
        gpm_intervals=sum(len(v) for v in gpm.readings.values()), dcgm_scrapes=dc.scrapes,
        dcgm_scrape_errors=len(dc.errors),
        # the exporter's host label: a mismatch with the target's host means another node's GPUs
        dcgm_exporter_hosts=tuple(sorted({e.hostname for rows in dc.series.values() for _, e in rows[-1:]
                                          if e.hostname})))


def gpu_signals(bundle: Bundle, params: AnalysisParams = DEFAULT_PARAMS) -> SourceResult:
    """``gpu.*`` signals from the NVML, GPM and DCGM streams, with the GPU table in
    ``details`` (``gpu_devices``, ``gpu_mig_instances``). Raises nothing for missing streams:
    every unknown signal carries the reason of each source it could have come from."""
    nv, gpm, dc = read_nvml(bundle), read_gpm(bundle), read_dcgm(bundle)
    base = _source_reasons(bundle, nv, gpm, dc)
    scope = target_scope(nv, gpm, dc)
    if not scope.uuids:
        return SourceResult(_unavailable(base), DataQuality(gpu=GpuQuality(counters="unavailable")))
    every = sorted(set(scope.uuids) | set(scope.names))
    per_gpu = {u: _per_source(u, scope, nv, gpm, dc, base) for u in every}
    picks = {u: {s.name: pick(s, per_gpu[u]) for s in SIGNALS} for u in every}
    signals = {s.name: combine(s, {u: picks[u][s.name] for u in scope.uuids}, scope) for s in SIGNALS}
    signals["gpu.count"] = Signal("gpu.count", float(len(scope.uuids)), "GPUs", scope.label)
    signals.update(roofline(bundle, scope, signals["gpu.dram_active_pct"]))
    details = Details(gpu_devices=_device_rows(scope, picks, nv), gpu_mig_instances=mig_table(dc))
    return SourceResult(signals, DataQuality(gpu=_quality(scope.label, nv, gpm, dc)), details)


__all__ = ["SIGNALS", "GpuSignal", "gpu_signals", "pick", "target_scope"]

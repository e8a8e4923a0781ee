"""``diagnose doctor``: what NVML, GPM and DCGM offer on this host. Reads only, changes nothing.

For each GPU it makes one NVML read through the collector's own backend and lists which counters
came back and which are unknown, with NVML's reason (NotSupported under MIG, NoPermission...).
With ``--dcgm URL`` it scrapes the exporter once and lists the profiling fields it exposes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from diagnose.bundle.records.gpu import DcgmEntity, NvmlHostRecord
from diagnose.catalogs.dcgm_fields import BY_KEY
from diagnose.collectors.dcgm import DcgmError, import_bindings, make_source
from diagnose.collectors.nvml_backend import LiveNvmlBackend, NvmlBackend, NvmlUnavailable, now_us
from diagnose.doctor.host import Check

PROFILING_KEYS = ("sm_active_pct", "gr_engine_active_pct", "sm_occupancy_pct", "tensor_active_pct",
                  "dram_active_pct")


def nvml_checks(factory: Callable[[], NvmlBackend] = LiveNvmlBackend) -> list[Check]:
    backend = factory()
    try:
        host = msgspec.convert(backend.open(), NvmlHostRecord)
        devices = backend.devices() if host.device_count else []
        if not devices:
            return [Check("NVML", "warn", "no GPU visible to NVML",
                          "GPU counters will be unknown; check CUDA_VISIBLE_DEVICES or --gpus")]
        out = [Check("NVML", "ok", f"{len(devices)} GPU(s), driver {host.driver_version}, "
                                   f"NVML {host.nvml_version}")]
        out += [_device_check(backend, d) for d in devices]
        out.append(_gpm_check(devices))
        return out
    except NvmlUnavailable as exc:
        return [Check("NVML", "warn", f"unavailable: {exc}", "GPU counters will be reported as unknown"),
                Check("GPM", "warn", "unavailable: needs NVML")]
    finally:
        backend.close()


def _device_check(backend: NvmlBackend, dev: dict[str, Any]) -> Check:
    res = backend.read(dev["index"], now_us())
    unknown = {**dev.get("unknown", {}), **res.get("unknown", {})}
    detail = (f"{dev.get('name')} ({dev.get('architecture')}{', MIG' if dev.get('mig_mode') else ''}): "
              f"offers {', '.join(sorted(res.get('values', {}))) or 'nothing'}")
    if unknown:
        detail += "; unknown: " + "; ".join(f"{k} ({v})" for k, v in sorted(unknown.items()))
    return Check(f"GPU {dev['index']}", "warn" if "gpu_util_pct" in unknown else "ok", detail)


def _gpm_check(devices: list[dict[str, Any]]) -> Check:
    ok = [d for d in devices if d.get("gpm_supported")]
    lines = [f"GPU {d['index']}: {'supported' if d.get('gpm_supported') else d.get('gpm_reason')}" for d in devices]
    if ok:
        return Check("GPM", "ok", "; ".join(lines) + " (SM activity, occupancy, tensor and DRAM utilisation)")
    return Check("GPM", "warn", "; ".join(lines),
                 "SM vs DRAM activity needs GPM (Hopper+) or DCGM: pass --dcgm URL of a dcgm-exporter")


def dcgm_checks(url: str | None) -> list[Check]:
    try:
        import_bindings()
        out = [Check("DCGM bindings", "ok", "importable: --dcgm dcgm://localhost reads nv-hostengine")]
    except DcgmError as exc:
        out = [Check("DCGM bindings", "info", f"{exc} (optional: a dcgm-exporter URL works without them)")]
    if url is None:
        return out + [Check("DCGM exporter", "info", "not checked: pass --dcgm URL to check a dcgm-exporter")]
    source = None
    try:
        source = make_source(url)
        source.open()
        entities, _ = source.fetch()
    except (ValueError, DcgmError) as exc:
        return out + [Check("DCGM exporter", "fail", str(exc), "check the URL and that dcgm-exporter runs")]
    finally:
        if source is not None:
            source.close()
    return out + [_exporter_check(url, entities)]


def _exporter_check(url: str, raw: list[dict[str, Any]]) -> Check:
    if not raw:
        return Check("DCGM exporter", "fail", f"{url} exposes no DCGM GPU field", "is it a dcgm-exporter?")
    entities = msgspec.convert(raw, list[DcgmEntity])
    gpus = [e for e in entities if e.gpu_instance_id is None]
    mig = [e for e in entities if e.gpu_instance_id is not None]
    seen = {k for e in entities for k in e.values}
    blank = {k for e in entities for k in e.unknown}
    models = ", ".join(sorted({e.model for e in gpus if e.model})) or "model not labelled"
    detail = (f"{url}: {len(gpus)} GPU(s) ({models}), {len(mig)} MIG instance(s); profiling fields: "
              + ", ".join(f"{BY_KEY[k].names[0]} {'blank' if k in blank else 'ok' if k in seen else 'absent'}"
                          for k in PROFILING_KEYS))
    level = "ok" if {"dram_active_pct"} & seen else "warn"
    return Check("DCGM exporter", level, detail)


def gpu_checks(dcgm_url: str | None = None) -> list[Check]:
    return nvml_checks() + dcgm_checks(dcgm_url)


__all__ = ["dcgm_checks", "gpu_checks", "nvml_checks"]

"""report.md section: the GPU table (per GPU and per MIG instance) from ``Analysis.details``.

Rows come from diagnose/signals/gpu.py (``gpu_devices``, ``gpu_mig_instances``); "counted" marks
the GPUs the gpu.* signals combine (the target's, or all where those are unknown). A value is "-"
where no counter offered it (the signals table gives the reason).
"""
from __future__ import annotations

from typing import Any

from diagnose.render.markdown.gfm import cell
from diagnose.render.units import fmt_pct
from diagnose.results.details import Details

COLUMNS = (("SM active", "gpu.sm_active_pct"), ("engine", "gpu.gr_engine_active_pct"),
           ("tensor", "gpu.tensor_active_pct"), ("DRAM", "gpu.dram_active_pct"),
           ("GPU-Util", "gpu.kernel_busy_pct"), ("power/limit", "gpu.power_pct_of_limit"),
           ("throttled", "gpu.throttled_share_pct"))
MIG_COLUMNS = (("engine", "gr_engine_active_pct"), ("SM active", "sm_active_pct"),
               ("tensor", "tensor_active_pct"), ("DRAM", "dram_active_pct"))


def _pct(value: float | None) -> str:
    return fmt_pct(value)


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def gpu_section(details: Details) -> list[str]:
    devices = details.gpu_devices
    if not devices:
        return []
    out = ["## GPUs (time-weighted over the capture)", "",
           _row(["GPU", "model", "counted", *[c for c, _ in COLUMNS], "SM/DRAM from"]),
           "|" + "---|" * (len(COLUMNS) + 4)]
    for d in devices:
        src = d.sources.get("gpu.sm_active_pct") or d.sources.get("gpu.dram_active_pct") or "-"
        out.append(_row([d.gpu, d.name, "yes" if d.target else "no", *[_pct(d.values.get(k)) for _, k in COLUMNS],
                         src]))
    mig = details.gpu_mig_instances
    if mig:
        out += ["", "MIG instances (DCGM):", "",
                _row(["GPU", "GPU_I_ID", "profile", *[c for c, _ in MIG_COLUMNS]]),
                "|" + "---|" * (len(MIG_COLUMNS) + 3)]
        out += [_row([m.uuid, m.gpu_instance_id, m.profile or "-", *[_pct(m.values.get(k)) for _, k in MIG_COLUMNS]])
                for m in mig]
    return out + [""]


__all__ = ["gpu_section"]

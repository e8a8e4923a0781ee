"""The GPUs a Kineto trace describes in ``deviceProperties``: name plus the facts that identify a
model when the name does not.

ROCm often writes a generic name (``"AMD Radeon Graphics"`` in the shared MI250 trace, when the
runtime finds no marketing name), and one name can cover two models (``"AMD Instinct MI250X /
MI250"``). The compute capability (CUDA) or GFXIP version (ROCm, ``computeMajor``/``computeMinor``),
the SM/CU count (``numSms``) and the memory size (``totalGlobalMem``, bytes) tell them apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class DeviceProps:
    """One ``deviceProperties`` row. ``None`` where the trace does not say."""

    name: str
    compute: tuple[int, int] | None = None  # (computeMajor, computeMinor)
    sm_count: int | None = None  # numSms: SMs (NVIDIA) or compute units (AMD) of this device
    mem_bytes: int | None = None  # totalGlobalMem

    @property
    def mem_gib(self) -> int | None:
        """Memory rounded to whole GiB (a 64 GB part reports a little under 64 GiB)."""
        return round(self.mem_bytes / GIB) if self.mem_bytes else None


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def device_props(rows: Any) -> tuple[DeviceProps, ...]:
    """``deviceProperties`` (a list of dicts) -> DeviceProps; malformed rows are skipped."""
    out = []
    for row in rows if isinstance(rows, list) else ():
        if not isinstance(row, dict):
            continue
        major, minor = _int(row.get("computeMajor")), _int(row.get("computeMinor"))
        out.append(DeviceProps(str(row.get("name", "?")),
                               (major, minor) if major is not None and minor is not None else None,
                               _int(row.get("numSms")) or None, _int(row.get("totalGlobalMem")) or None))
    return tuple(out)


__all__ = ["DeviceProps", "device_props"]

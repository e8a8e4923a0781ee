"""The GPUs a Kineto trace describes in ``deviceProperties``: name plus the facts that identify a
model when the name does not.

ROCm often writes a generic name (``"AMD Radeon Graphics"`` in the shared MI250 trace, when the
runtime finds no marketing name), and one name can cover two models (``"AMD Instinct MI250X /
MI250"``). The compute capability (CUDA) or GFXIP version (ROCm, ``computeMajor``/``computeMinor``),
the SM/CU count (``numSms``) and the memory size (``totalGlobalMem``, bytes) tell them apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta, Struct

from diagnose.bundle.records.base import lenient

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


NonNegative = Annotated[int, Meta(ge=0)]


class _DeviceRow(Struct, frozen=True, rename="camel"):
    """One ``deviceProperties`` entry as torch writes it (``computeMajor``...; unknown keys ignored)."""

    name: str = "?"
    compute_major: NonNegative | None = None
    compute_minor: NonNegative | None = None
    num_sms: NonNegative | None = None
    total_global_mem: NonNegative | None = None


def device_props(rows: Any) -> tuple[DeviceProps, ...]:
    """``deviceProperties`` (a list of dicts) -> DeviceProps, each field read leniently (a wrong one
    is unknown); rows that are not objects are skipped."""
    out = []
    for raw in rows if isinstance(rows, list) else ():
        row = lenient(_DeviceRow, raw)
        if row is None:
            continue
        major, minor = row.compute_major, row.compute_minor
        out.append(DeviceProps(row.name, (major, minor) if major is not None and minor is not None else None,
                               row.num_sms or None, row.total_global_mem or None))
    return tuple(out)


__all__ = ["DeviceProps", "device_props"]

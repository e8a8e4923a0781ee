"""Roofline data per GPU model: dense FP16/BF16 tensor peak and memory bandwidth, with sources.

The ridge point (FLOP/byte) is derived: peak FLOP/s / peak bytes/s. A kernel whose arithmetic
intensity lies below it is bandwidth-bound on that GPU, above it compute-bound. Datasheets quote
tensor peaks *with* 2:4 sparsity; the dense figure (half) is what ordinary models reach.

Figures are per device as software sees it: an MI250/MI250X module is two devices (one per
graphics compute die, GCD), each with half the module's peak and bandwidth (same ridge). V100 has
no BF16: its row holds the FP16 tensor-core peak. AMD CDNA2/CDNA3 peaks quoted here are dense.

A row may also require device facts (``Fingerprint``: compute capability / GFXIP version, SM or CU
count, memory) that a torch trace's ``deviceProperties`` carries: ROCm writes a generic name such
as "AMD Radeon Graphics" when it finds no marketing name, and "AMD Instinct MI250X / MI250" names
two models; the CU count tells them apart. Callers without those facts (NVML names) never match
such rows.

The table is data. Override or extend it per bundle with ``gpu_specs.json`` (a list of rows with
``model``, ``match`` (regex on the NVML/DCGM device name), ``dense_bf16_tflops``,
``mem_tb_per_s`` and ``source``); those rows are tried before the built-in ones.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

OVERRIDE_FILE = "gpu_specs.json"


@dataclass(frozen=True)
class Fingerprint:
    """Device facts besides the name; a row requiring one matches only devices with equal facts
    (fields left None are not compared)."""

    compute: tuple[int, int] | None = None  # CUDA compute capability / AMD GFXIP (major, minor)
    units: int | None = None  # SMs (NVIDIA) or compute units (AMD) of one device
    mem_gib: int | None = None  # device memory, whole GiB

    def admits(self, facts: Fingerprint | None) -> bool:
        if facts is None:
            return False
        pairs = ((self.compute, facts.compute), (self.units, facts.units), (self.mem_gib, facts.mem_gib))
        return all(want is None or want == got for want, got in pairs)


@dataclass(frozen=True)
class GpuSpec:
    model: str
    match: str  # regular expression on the device name (NVML nvmlDeviceGetName, DCGM modelName)
    dense_bf16_flops_per_s: float
    mem_bytes_per_s: float
    source: str
    requires: Fingerprint | None = None  # facts the device must also show (torch deviceProperties)

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity at which the compute and bandwidth roofs meet."""
        return self.dense_bf16_flops_per_s / self.mem_bytes_per_s


def _spec(model: str, match: str, tflops: float, tb_per_s: float, source: str,
          requires: Fingerprint | None = None) -> GpuSpec:
    return GpuSpec(model, match, tflops * 1e12, tb_per_s * 1e12, source, requires)


_V100 = ("NVIDIA V100 datasheet ({}: {} TFLOPS FP16 tensor (V100 has no BF16; no sparsity), 900 GB/s "
         "HBM2, 16 and 32 GB alike)")
_AMD = "AMD Instinct {} data sheet ({} TFLOPS peak BF16 matrix (dense), {} TB/s {}{})"
_MI250_GCD = ", per module of two GCDs; torch sees each GCD as a device with half of both: same ridge"
# CDNA2 (gfx90a, GFXIP 9.0): 110 CUs per MI250X GCD, 104 per MI250 GCD and per MI210; 64 GB each.
_GCD_110, _GCD_104 = Fingerprint((9, 0), 110, 64), Fingerprint((9, 0), 104, 64)
_MI300X = Fingerprint((9, 4), 304, 192)  # CDNA3 gfx942, one device per module (SPX mode)


# Most specific patterns first: the first match wins.
GPU_SPECS: tuple[GpuSpec, ...] = (
    _spec("H200", r"H200", 989, 4.8, "NVIDIA H200 datasheet (SXM: 1,979 TFLOPS BF16 with sparsity, 4.8 TB/s)"),
    _spec("H100 PCIe", r"H100.*PCIe", 756, 2.0,
          "NVIDIA H100 datasheet (PCIe: 1,513 TFLOPS BF16 with sparsity, 2 TB/s)"),
    _spec("H100 SXM", r"H100", 989, 3.35, "NVIDIA H100 datasheet (SXM: 1,979 TFLOPS BF16 with sparsity, 3.35 TB/s)"),
    _spec("A100 80GB PCIe", r"A100.*80GB.*PCIe", 312, 1.935,
          "NVIDIA A100 datasheet (624 TFLOPS BF16 with sparsity; 80GB PCIe 1,935 GB/s)"),
    _spec("A100 80GB SXM", r"A100.*80GB", 312, 2.039,
          "NVIDIA A100 datasheet (624 TFLOPS BF16 with sparsity; 80GB SXM 2,039 GB/s)"),
    _spec("A100 40GB", r"A100", 312, 1.555, "NVIDIA A100 datasheet (624 TFLOPS BF16 with sparsity; 40GB 1,555 GB/s)"),
    _spec("L40S", r"L40S", 362, 0.864, "NVIDIA L40S datasheet (733 TFLOPS BF16 with sparsity, 864 GB/s)"),
    _spec("L4", r"\bL4\b", 121, 0.30, "NVIDIA L4 datasheet (242 TFLOPS BF16 with sparsity, 300 GB/s)"),
    _spec("A10", r"\bA10\b", 125, 0.60, "NVIDIA A10 datasheet (250 TFLOPS BF16 with sparsity, 600 GB/s)"),
    _spec("T4", r"\bT4\b", 65, 0.32, "NVIDIA T4 datasheet (65 TFLOPS FP16 mixed precision, 320 GB/s)"),
    _spec("V100 SXM2", r"V100-SXM2", 125, 0.90, _V100.format("SXM2", 125)),
    _spec("V100 PCIe", r"V100-PCIE", 112, 0.90, _V100.format("PCIe", 112)),
    # AMD: names first (the CU count splits "MI250X / MI250"), then generic ROCm names by facts.
    _spec("MI300X", r"MI300X", 1307.4, 5.3, _AMD.format("MI300X", 1307.4, 5.3, "HBM3", "")),
    _spec("MI250X (one GCD)", r"MI250X", 191.5, 1.6, _AMD.format("MI250X", 383, 3.2, "HBM2e", _MI250_GCD), _GCD_110),
    _spec("MI250 (one GCD)", r"MI250", 181.05, 1.6, _AMD.format("MI250", 362.1, 3.2, "HBM2e", _MI250_GCD), _GCD_104),
    _spec("MI250X (one GCD)", r"MI250X(?!\s*/)", 191.5, 1.6, _AMD.format("MI250X", 383, 3.2, "HBM2e", _MI250_GCD)),
    _spec("MI250 (one GCD)", r"MI250", 181.05, 1.6, _AMD.format("MI250", 362.1, 3.2, "HBM2e", _MI250_GCD)),
    _spec("MI210", r"MI210", 181, 1.6, _AMD.format("MI210", 181, 1.6, "HBM2e", "")),
    _spec("MI250X (one GCD)", r"^AMD\b", 191.5, 1.6, _AMD.format("MI250X", 383, 3.2, "HBM2e", _MI250_GCD)
          + "; identified by GFXIP 9.0, 110 CUs, 64 GB", _GCD_110),
    _spec("MI250 (one GCD) or MI210", r"^AMD\b", 181.05, 1.6, _AMD.format("MI250", 362.1, 3.2, "HBM2e", _MI250_GCD)
          + "; MI210 has the same per-device figures; identified by GFXIP 9.0, 104 CUs, 64 GB", _GCD_104),
    _spec("MI300X", r"^AMD\b", 1307.4, 5.3, _AMD.format("MI300X", 1307.4, 5.3, "HBM3", "")
          + "; identified by GFXIP 9.4, 304 CUs, 192 GB", _MI300X),
)


class SpecError(ValueError):
    """An override row is malformed; the message names the row and the field."""


def parse_overrides(rows: Any) -> tuple[GpuSpec, ...]:
    """``gpu_specs.json`` content -> specs. Raises SpecError naming the bad row."""
    if not isinstance(rows, list):
        raise SpecError(f"{OVERRIDE_FILE} must hold a JSON list of rows")
    out = []
    for i, row in enumerate(rows):
        try:
            match = row["match"]
            if not isinstance(match, str) or not match:
                raise ValueError("match must be a non-empty regular expression")
            out.append(_spec(str(row["model"]), match, _positive(row, "dense_bf16_tflops"),
                             _positive(row, "mem_tb_per_s"), str(row.get("source") or f"{OVERRIDE_FILE} row {i}")))
            re.compile(out[-1].match)
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise SpecError(f"{OVERRIDE_FILE} row {i}: {exc!r}; expected model, match, "
                            "dense_bf16_tflops, mem_tb_per_s, source") from None
    return tuple(out)


def _positive(row: dict, key: str) -> float:
    """A finite, positive figure (a zero bandwidth would divide the ridge by zero)."""
    v = row[key]
    if type(v) not in (int, float) or not math.isfinite(v) or not 0 < v < 1e6:
        raise ValueError(f"{key} must be a positive number, got {v!r}")
    return float(v)


MATCH_CHARS = 256  # device names longer than this are cut before matching (no regex runs away)


def find_spec(device_name: str | None, specs: Iterable[GpuSpec] = GPU_SPECS,
              facts: Fingerprint | None = None) -> GpuSpec | None:
    """The first spec whose pattern matches ``device_name`` (case-insensitive) and whose required
    facts, if any, ``facts`` shows; else None."""
    if not device_name:
        return None
    device_name = device_name[:MATCH_CHARS]
    return next((s for s in specs if re.search(s.match, device_name, re.IGNORECASE)
                 and (s.requires is None or s.requires.admits(facts))), None)


__all__ = ["GPU_SPECS", "Fingerprint", "GpuSpec", "OVERRIDE_FILE", "SpecError", "find_spec", "parse_overrides"]

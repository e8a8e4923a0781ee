"""Roofline data per GPU model: dense FP16/BF16 tensor peak and memory bandwidth, with sources.

The ridge point (FLOP/byte) is derived: peak FLOP/s / peak bytes/s. A kernel whose arithmetic
intensity lies below it is bandwidth-bound on that GPU, above it compute-bound. Datasheets quote
tensor peaks *with* 2:4 sparsity; the dense figure (half) is what ordinary models reach.

The table is data. Override or extend it per bundle with ``gpu_specs.json`` (a list of rows with
``model``, ``match`` (regex on the NVML/DCGM device name), ``dense_bf16_tflops``,
``mem_tb_per_s`` and ``source``); those rows are tried before the built-in ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

OVERRIDE_FILE = "gpu_specs.json"


@dataclass(frozen=True)
class GpuSpec:
    model: str
    match: str  # regular expression on the device name (NVML nvmlDeviceGetName, DCGM modelName)
    dense_bf16_flops_per_s: float
    mem_bytes_per_s: float
    source: str

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity at which the compute and bandwidth roofs meet."""
        return self.dense_bf16_flops_per_s / self.mem_bytes_per_s


def _spec(model: str, match: str, tflops: float, tb_per_s: float, source: str) -> GpuSpec:
    return GpuSpec(model, match, tflops * 1e12, tb_per_s * 1e12, source)


# Most specific patterns first: the first match wins.
GPU_SPECS: tuple[GpuSpec, ...] = (
    _spec("H200", r"H200", 989, 4.8, "NVIDIA H200 datasheet (SXM: 1,979 TFLOPS BF16 with sparsity, 4.8 TB/s)"),
    _spec("H100 PCIe", r"H100.*PCIe", 756, 2.0, "NVIDIA H100 datasheet (PCIe: 1,513 TFLOPS BF16 with sparsity, 2 TB/s)"),
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
            out.append(_spec(str(row["model"]), str(row["match"]), float(row["dense_bf16_tflops"]),
                             float(row["mem_tb_per_s"]), str(row.get("source") or f"{OVERRIDE_FILE} row {i}")))
            re.compile(out[-1].match)
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise SpecError(f"{OVERRIDE_FILE} row {i}: {exc!r}; expected model, match, "
                            "dense_bf16_tflops, mem_tb_per_s, source") from None
    return tuple(out)


def find_spec(device_name: str | None, specs: Iterable[GpuSpec] = GPU_SPECS) -> GpuSpec | None:
    """The first spec whose pattern matches ``device_name`` (case-insensitive), else None."""
    if not device_name:
        return None
    return next((s for s in specs if re.search(s.match, device_name, re.IGNORECASE)), None)


__all__ = ["GPU_SPECS", "GpuSpec", "OVERRIDE_FILE", "SpecError", "find_spec", "parse_overrides"]

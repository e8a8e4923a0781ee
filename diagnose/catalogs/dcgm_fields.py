"""DCGM fields diagnose reads, under their old and new names, and the dcgm-exporter text parser.

dcgm-exporter exposes each DCGM field as a Prometheus gauge named after it. DCGM 4.6 renamed many
fields (dcgm_fields.py ``_DEPRECATED_ALIASES``: ``DCGM_FI_PROF_SM_ACTIVE`` ->
``DCGM_FI_PROF_SM_UTIL_RATIO``, ``DCGM_FI_DEV_GPU_UTIL`` -> ``DCGM_FI_DEV_GPU_UTIL_RATIO``...);
the field id, and so the unit, stays the same, so both names map to one key here.
``DCGM_FI_PROF_*`` ratios are 0..1 and become percent; DEV utilisations are already percent.

A value >= 0x7ffffffffffffff0 (DCGM_INT64_BLANK and above) or, for floating-point fields, >= 2**47
(DCGM_FP64_BLANK) is DCGM's "blank": not supported, or no data yet. It is recorded as unknown.
Labels: ``UUID``, ``gpu``, ``modelName``, ``Hostname`` (older exporters) or ``hostname`` (newer),
and under MIG ``GPU_I_ID``/``GPU_I_PROFILE``; label names are matched case-insensitively.
Parsing uses prometheus_client's text parser.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0  # 2**47, dcgm_structs.DCGM_FP64_BLANK
BLANK_REASON = "blank value from DCGM (>= 0x7ffffffffffffff0): not supported on this GPU or no data yet"


@dataclass(frozen=True)
class DcgmField:
    key: str  # name in the DCGM stream's records, with its unit
    names: tuple[str, ...]  # exporter/DCGM names, pre-4.6 first
    factor: float  # to the key's unit
    is_float: bool  # DCGM FP64 field (blank = 2**47)


def _prof(key: str, old: str, new: str) -> DcgmField:
    return DcgmField(key, (f"DCGM_FI_PROF_{old}", f"DCGM_FI_PROF_{new}"), 100.0, True)


FIELDS: tuple[DcgmField, ...] = (
    DcgmField("gpu_util_pct", ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"), 1.0, False),
    DcgmField("mem_copy_util_pct", ("DCGM_FI_DEV_MEM_COPY_UTIL",), 1.0, False),
    _prof("gr_engine_active_pct", "GR_ENGINE_ACTIVE", "GR_ENGINE_UTIL_RATIO"),
    _prof("sm_active_pct", "SM_ACTIVE", "SM_UTIL_RATIO"),
    _prof("sm_occupancy_pct", "SM_OCCUPANCY", "SM_OCCUPANCY_RATIO"),
    _prof("tensor_active_pct", "PIPE_TENSOR_ACTIVE", "TENSOR_UTIL_RATIO"),
    _prof("dram_active_pct", "DRAM_ACTIVE", "DRAM_UTIL_RATIO"),
    _prof("fp64_active_pct", "PIPE_FP64_ACTIVE", "FP64_UTIL_RATIO"),
    _prof("fp32_active_pct", "PIPE_FP32_ACTIVE", "FP32_UTIL_RATIO"),
    _prof("fp16_active_pct", "PIPE_FP16_ACTIVE", "FP16_UTIL_RATIO"),
    DcgmField("pcie_tx_bytes_per_s", ("DCGM_FI_PROF_PCIE_TX_BYTES",), 1.0, False),
    DcgmField("pcie_rx_bytes_per_s", ("DCGM_FI_PROF_PCIE_RX_BYTES",), 1.0, False),
    DcgmField("nvlink_tx_bytes_per_s", ("DCGM_FI_PROF_NVLINK_TX_BYTES",), 1.0, False),
    DcgmField("nvlink_rx_bytes_per_s", ("DCGM_FI_PROF_NVLINK_RX_BYTES",), 1.0, False),
    DcgmField("sm_clock_mhz", ("DCGM_FI_DEV_SM_CLOCK",), 1.0, False),
    DcgmField("mem_clock_mhz", ("DCGM_FI_DEV_MEM_CLOCK",), 1.0, False),
    DcgmField("power_w", ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS"), 1.0, True),
    DcgmField("power_limit_w", ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
                                "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS"), 1.0, True),
    DcgmField("temp_c", ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"), 1.0, False),
    DcgmField("fb_used_mib", ("DCGM_FI_DEV_FB_USED",), 1.0, False),
    DcgmField("fb_free_mib", ("DCGM_FI_DEV_FB_FREE",), 1.0, False),
)
BY_NAME: dict[str, DcgmField] = {n: f for f in FIELDS for n in f.names}
BY_KEY: dict[str, DcgmField] = {f.key: f for f in FIELDS}


def is_blank(value: float, field: DcgmField) -> bool:
    return value >= INT64_BLANK or (field.is_float and value >= FP64_BLANK)


class GpuLabels(msgspec.Struct, frozen=True):
    """The labels that say which GPU (or MIG instance) a sample is of, by their lower-case names
    (None: not given). ``key`` identifies it within one scrape."""

    uuid: str | None = None
    gpu: str | None = None
    gpu_i_id: str | None = None
    gpu_i_profile: str | None = None
    modelname: str | None = None
    hostname: str | None = None
    pci_bus_id: str | None = None

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        return self.uuid, self.gpu, self.gpu_i_id


def gpu_labels(labels: Mapping[str, str | None]) -> GpuLabels:
    """The GpuLabels of a sample's labels (names matched case-insensitively)."""
    return msgspec.convert({k.lower(): v for k, v in labels.items()}, GpuLabels)


def new_entity(labels: Mapping[str, str | None] | GpuLabels) -> dict[str, Any]:
    """One GPU (or MIG instance) of a scrape, identified by its labels (None: not known)."""
    lab = labels if isinstance(labels, GpuLabels) else gpu_labels(labels)
    return {
        "uuid": lab.uuid, "gpu": lab.gpu, "gpu_instance_id": lab.gpu_i_id, "gpu_instance_profile": lab.gpu_i_profile,
        "model": lab.modelname, "hostname": lab.hostname, "pci_bus_id": lab.pci_bus_id,
        "values": {}, "unknown": {}, "names": {},
    }


def put_value(entity: dict[str, Any], name: str, value: float) -> None:
    """Store one field value (by any of its names) into ``entity``, blanks as unknown."""
    field = BY_NAME[name]
    entity["names"][field.key] = name
    if math.isnan(value):
        entity["unknown"][field.key] = "NaN from the exporter"
    elif is_blank(value, field):
        entity["unknown"][field.key] = BLANK_REASON
    else:
        entity["values"][field.key] = value * field.factor
        entity["unknown"].pop(field.key, None)


def parse_exposition(text: str) -> list[dict[str, Any]]:
    """dcgm-exporter /metrics text -> entities (GPUs and MIG instances) with the fields we know.

    Raises ValueError when the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    entities: dict[tuple[str | None, str | None, str | None], dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in BY_NAME:
                continue
            labels = gpu_labels(sample.labels)
            entity = entities.get(labels.key)
            if entity is None:
                entity = entities[labels.key] = new_entity(labels)
            put_value(entity, sample.name, float(sample.value))
    return list(entities.values())


__all__ = ["BLANK_REASON", "BY_KEY", "BY_NAME", "FIELDS", "DcgmField", "GpuLabels", "gpu_labels", "is_blank", "new_entity",
           "parse_exposition", "put_value"]

"""The GPU streams: NVML (collectors/nvml.py), GPM (collectors/gpm.py) and DCGM (collectors/dcgm.py).

Each stream mixes record kinds told apart by ``"kind"``: one tagged union per stream (``NvmlRecord``,
``GpmRecord``, ``DcgmRecord``), so a record of an unknown kind is dropped and counted like any
record of the wrong shape. Times are Unix ns (``t_ns``) unless the field says otherwise.

What is typed strictly: a record's kind, time and GPU, its facts, labels and reason texts, and a
DCGM scrape's list of entities; one of them wrong drops the record. What is filtered entry by
entry (a loose field read through a cached property, as ``PyspyWindowRecord.origin``): the
numbers and rows a reading carries (NVML ``values``, ``samples``, ``process_samples``; GPM
``metrics``; DCGM entity ``values``) and a target record's GPU indices and process rows, so one
malformed number or row costs only itself, never its record.

The NVML/GPM call recordings (NVML_CALLS, GPM_CALLS) are read by collectors/nvml_replay.py as a
backend's answers, not through Bundle, and are not typed here.
"""
from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, NamedTuple

from msgspec import Meta, field

from diagnose.bundle.records.base import Count, Record, UnixNs

GpuIndex = Annotated[int, Meta(ge=0, lt=2**32)]  # NVML's device index (nvmlDeviceGetHandleByIndex)
# A device fact such as a clock or a power limit: an int as NVML answers it, a float where a replay
# built it from nvidia-smi text (kept as written: the report prints it)
Amount = Annotated[int, Meta(ge=0, lt=2**62)] | Annotated[float, Meta(ge=0, le=1e300)]


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def numbers(d: Any) -> dict[str, float]:
    """The numeric entries of ``d`` (a hand-edited stream may hold anything there)."""
    return {k: v for k, v in d.items() if _is_num(v)} if isinstance(d, dict) else {}


def _rows(rows: Any, width: int) -> list[tuple[float, ...]]:
    """The rows of ``rows`` that are ``width`` numbers each."""
    if not isinstance(rows, list):
        return []
    return [tuple(r) for r in rows if isinstance(r, list) and len(r) == width and all(map(_is_num, r))]


# ---- NVML ---------------------------------------------------------------------------------------

class NvmlHostRecord(Record, tag="host", tag_field="kind"):
    """Host facts, first in the stream (LiveNvmlBackend.open; None where NVML refused the call)."""

    t_ns: UnixNs | None = None  # time.time_ns() when the collector started
    device_count: Count | None = None  # nvmlDeviceGetCount
    driver_version: str | None = None  # nvmlSystemGetDriverVersion, e.g. "580.159.04"
    nvml_version: str | None = None  # nvmlSystemGetNVMLVersion
    cuda_driver_version: int | None = None  # nvmlSystemGetCudaDriverVersion, e.g. 13000 for 13.0
    clock: str | None = None  # how the stream's times map to the Unix clock (nvml.CLOCK_NOTE)


class NvmlDeviceRecord(Record, tag="device", tag_field="kind"):
    """Static facts of one GPU (LiveNvmlBackend.devices); a fact NVML refused is None, its reason
    in ``unknown``."""

    gpu: GpuIndex
    uuid: str | None = None  # nvmlDeviceGetUUID, "GPU-..."
    name: str | None = None  # nvmlDeviceGetName, e.g. "NVIDIA H200"
    pci_bus_id: str | None = None  # nvmlDeviceGetPciInfo().busId
    memory_total_bytes: Count | None = None  # nvmlDeviceGetMemoryInfo().total
    sm_clock_max_mhz: Amount | None = None  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)
    mem_clock_max_mhz: Amount | None = None  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)
    power_limit_mw: Amount | None = None  # nvmlDeviceGetEnforcedPowerLimit, milliwatts
    mig_mode: bool | None = None  # nvmlDeviceGetMigMode: MIG enabled
    architecture: str | None = None  # nvmlDeviceGetArchitecture as a name ("hopper"...)
    gpm_supported: bool | None = None  # gpm.gpm_support
    gpm_reason: str | None = None
    unknown: dict[str, str] = {}  # fact -> NVML's reason (NotSupported, NoPermission...)


class ProcessRow(NamedTuple):
    """One row of NVML's compute-process list (nvmlDeviceGetComputeRunningProcesses), host pids."""

    pid: int
    used_bytes: int | None  # usedGpuMemory
    gpu_instance_id: int | None  # gpuInstanceId; None outside MIG


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class NvmlTargetRecord(Record, tag="target", tag_field="kind", dict=True):
    """The target's GPUs (NvmlCollector._refresh_target), written at start and on each change."""

    gpus_in: list[Any] = field(name="gpus")  # the GPU indices read: see ``gpus``
    t_ns: UnixNs | None = None
    matched: bool = False  # the target (or a child) is in a compute-process list
    pids_in: Any = field(default=None, name="pids")  # {gpu: [[pid, used_bytes, gpu_instance_id]]}: see ``pids``
    reason: str | None = None  # why all GPUs are read when nothing matched

    @cached_property
    def gpus(self) -> list[int]:
        """The GPU indices read (the target's when ``matched``, else every GPU); others left out."""
        return [g for g in self.gpus_in if _int(g)]

    @cached_property
    def pids(self) -> dict[int, list[ProcessRow]]:
        """{GPU index: the target's rows of its compute-process list}; malformed rows left out."""
        if not isinstance(self.pids_in, dict):
            return {}
        return {int(g): [ProcessRow(*r) for r in rows if isinstance(r, list) and len(r) == 3 and _int(r[0])
                         and all(x is None or _int(x) for x in r[1:])]
                for g, rows in self.pids_in.items() if g.isascii() and g.isdigit() and isinstance(rows, list)}


class NvmlReadingRecord(Record, tag="reading", tag_field="kind", dict=True):
    """One poll of one GPU (NvmlCollector._read, LiveNvmlBackend.read). ``t_ns``: when the poll
    returned. Sample times are NVML CPU timestamps, us since the Unix epoch."""

    t_ns: UnixNs
    gpu: GpuIndex
    values_in: Any = field(default=None, name="values")  # see ``values``
    unknown: dict[str, str] = {}  # counter (or ``samples.<counter>``, ``process_samples``) -> NVML's reason
    samples_in: Any = field(default=None, name="samples")  # see ``samples``
    process_samples_in: Any = field(default=None, name="process_samples")  # see ``process_samples``

    @cached_property
    def values(self) -> dict[str, float]:
        """The polled counters: ``gpu_util_pct``, ``mem_util_pct`` (nvmlDeviceGetUtilizationRates),
        ``mem_used_bytes``, ``mem_total_bytes`` (GetMemoryInfo), ``sm_clock_mhz``, ``mem_clock_mhz``
        (GetClockInfo), ``power_mw`` (GetPowerUsage), ``temp_c`` (GetTemperature),
        ``clock_event_reasons`` (GetCurrentClocksEventReasons bitmask), ``pcie_tx_bytes_per_s``,
        ``pcie_rx_bytes_per_s`` (GetPcieThroughput x 1024); entries that are not numbers left out."""
        return numbers(self.values_in)

    @cached_property
    def samples(self) -> dict[str, list[tuple[float, float]]]:
        """{counter: [(t_us, value)]} drained from the driver's buffer (nvmlDeviceGetSamples) since
        the previous poll; malformed rows left out."""
        raw = self.samples_in if isinstance(self.samples_in, dict) else {}
        return {k: [(t, v) for t, v in _rows(rows, 2)] for k, rows in raw.items()}

    @cached_property
    def process_samples(self) -> list[tuple[float, float, float, float]]:
        """The target's (pid, t_us, sm_pct, mem_pct) rows of nvmlDeviceGetProcessUtilization;
        malformed rows left out."""
        return [(p, t, sm, mem) for p, t, sm, mem in _rows(self.process_samples_in, 4)]


NvmlRecord = NvmlHostRecord | NvmlDeviceRecord | NvmlTargetRecord | NvmlReadingRecord


# ---- GPM ----------------------------------------------------------------------------------------

class GpmDeviceRecord(Record, tag="device", tag_field="kind"):
    """Whether one GPU offers GPU Performance Monitoring (gpm.gpm_support: Hopper or newer, not MIG)."""

    gpu: GpuIndex
    uuid: str | None = None  # nvmlDeviceGetUUID
    name: str | None = None  # nvmlDeviceGetName
    supported: bool = False
    reason: str | None = None  # why not


class GpmReadingRecord(Record, tag="reading", tag_field="kind", dict=True):
    """GPM metrics of one GPU averaged over the interval that ends at ``t_ns`` (GpmSampler.read:
    nvmlGpmSampleGet + nvmlGpmMetricsGet)."""

    t_ns: UnixNs
    gpu: GpuIndex
    interval_ns: Count | None = None  # between the two GPM samples (> 100 ms)
    metrics_in: Any = field(default=None, name="metrics")  # see ``metrics``
    unknown: dict[str, str] = {}  # metric -> NVML's reason for it

    @cached_property
    def metrics(self) -> dict[str, float]:
        """gpm.GPM_METRICS: ``*_util_pct``/``*_occupancy_pct`` in % (NVML_GPM_METRIC_*_UTIL, SM_OCCUPANCY),
        ``pcie_*``/``nvlink_*_bytes_per_s`` (the MiB/s metrics x 2**20); entries that are not numbers left out."""
        return numbers(self.metrics_in)


GpmRecord = GpmDeviceRecord | GpmReadingRecord


# ---- DCGM ---------------------------------------------------------------------------------------

class DcgmSourceRecord(Record, tag="source", tag_field="kind"):
    """Where the DCGM fields come from (DcgmCollector._setup), first in the stream."""

    t_ns: UnixNs | None = None
    mode: str | None = None  # "dcgm-exporter" or "nv-hostengine"
    url: str | None = None  # the exporter's /metrics URL, or dcgm://HOST:PORT


class DcgmEntity(Record, dict=True):
    """One GPU, or one MIG instance of it, in a scrape (catalogs/dcgm_fields.py new_entity): the
    exporter's labels (None where absent) and its field values."""

    uuid: str | None = None  # label UUID
    gpu: str | None = None  # label gpu: the DCGM GPU id, as text
    gpu_instance_id: str | None = None  # label GPU_I_ID (MIG instances only)
    gpu_instance_profile: str | None = None  # label GPU_I_PROFILE, e.g. "1g.5gb"
    model: str | None = None  # label modelName
    hostname: str | None = None  # label Hostname/hostname: the exporter's node
    pci_bus_id: str | None = None
    values_in: Any = field(default=None, name="values")  # see ``values``
    unknown: dict[str, str] = {}  # key -> why it has no value (DCGM's blank, NaN)
    names: dict[str, str] = {}  # key -> the field name the exporter used (pre- or post-4.6)

    @cached_property
    def values(self) -> dict[str, float]:
        """{dcgm_fields key: value in the key's unit} (``DCGM_FI_PROF_*`` ratios x 100 as %,
        ``power_w``, ``fb_used_mib``...); entries that are not numbers left out."""
        return numbers(self.values_in)


class DcgmScrapeRecord(Record, tag="scrape", tag_field="kind"):
    """One scrape (DcgmCollector._write): ``t_ns`` when it returned; the values are the exporter's
    latest, refreshed on its own period."""

    t_ns: UnixNs
    entities: list[DcgmEntity]


class DcgmErrorRecord(Record, tag="error", tag_field="kind"):
    """A scrape that failed (DcgmCollector.tick)."""

    t_ns: UnixNs | None = None
    reason: str | None = None


DcgmRecord = DcgmSourceRecord | DcgmScrapeRecord | DcgmErrorRecord


__all__ = ["DcgmEntity", "DcgmErrorRecord", "DcgmRecord", "DcgmScrapeRecord", "DcgmSourceRecord", "GpmDeviceRecord",
           "GpmReadingRecord", "GpmRecord", "NvmlDeviceRecord", "NvmlHostRecord",
           "NvmlReadingRecord", "NvmlRecord", "NvmlTargetRecord", "ProcessRow", "numbers"]

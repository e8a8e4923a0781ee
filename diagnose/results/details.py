"""Details: the tables renderers read, one typed section per signal source (findings.json ``details``).

Each signal source returns its own sections (diagnose/signals/base.py SourceResult); ``extract``
(diagnose/signals/__init__.py) lays each source's over the others'. A section the source did not
write keeps its default (None, or empty). Units are in the field names (``_ms``, ``_s``, ``_pct``, ``_ns``).

- cpu (signals/cpu.py): ``top_functions``
- gpu (signals/gpu.py): ``gpu_devices``, ``gpu_mig_instances``
- timeline (signals/timeline.py): ``torch_traces`` and ``trace_groups`` (the kernel timeline: the trace
  engine's own JSON, diagnose/traces/report.py ``TraceReport.to_json``), ``ranks`` (a job of several
  ranks: diagnose/ranks/model.py ``JobAnalysis.to_json``), ``requests``, ``llm``, ``tail`` (spans:
  results/spans.py) and ``join`` (py-spy inside GPU gaps and slow requests: results/joins.py)
- serving (signals/serving.py): ``serving`` (results/serving.py)
"""
from __future__ import annotations

from typing import Any

import msgspec

from diagnose.results.joins import JoinDetail, Joins, JoinThread, ShareRow, SpanShare
from diagnose.results.serving import GaugeDetail, HistogramDetail, RateDetail, ServingDetails
from diagnose.results.spans import (
    LatencyStats,
    LifetimeExcluded,
    LlmDetail,
    LlmPhases,
    NamedLatency,
    RequestsCoverage,
    RequestsDetail,
    SizeAttribute,
    TailDetail,
    TokenLatency,
)


class TopFunction(msgspec.Struct, frozen=True):
    """A function (``name (file:line)``) by its share of the sampled active thread-time: on the stack's
    top (``self_pct``) and anywhere on it (``total_pct``)."""

    function: str
    self_pct: float
    total_pct: float


class GpuDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU over the capture (diagnose/signals/gpu.py): its index (``gpu``, None when no stream
    names it), ``uuid``, model ``name``, whether the gpu.* signals combine it (``target``), the
    time-weighted ``values`` of the gpu.* signals it has (signal name -> value, in the signal's unit),
    the collector each came from (``sources``), and the share of NVML readings (%) each throttle
    reason was active (``throttle_share_pct``)."""

    gpu: int | None
    uuid: str
    name: str | None
    target: bool
    values: dict[str, float]
    sources: dict[str, str]
    throttle_share_pct: dict[str, float]


class MigInstance(msgspec.Struct, frozen=True, kw_only=True):
    """One MIG instance (DCGM, diagnose/signals/gpu_dcgm.py): the GPU's ``uuid``, the
    ``gpu_instance_id`` and ``profile`` labels and its time-weighted profiling ``values`` (%)."""

    uuid: str
    gpu_instance_id: str
    profile: str | None
    values: dict[str, float]


class TraceGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Torch traces that belong together (diagnose/signals/trace_groups.py): their ``files``, the part
    of each trace the GPU and torch-op accounts read (``torch_traces``: ``temporal`` span_ns/events,
    ``coverage`` host_span_ns) and the group's own signal values (name -> value)."""

    files: tuple[str, ...]
    torch_traces: tuple[dict[str, Any], ...]
    signals: dict[str, float]


class TraceGroups(msgspec.Struct, frozen=True, kw_only=True):
    """Traces that do not belong together: the ``warning`` and the ``groups``, the one the signals
    read first."""

    warning: str
    groups: tuple[TraceGroup, ...]


class Details(msgspec.Struct, frozen=True, kw_only=True):
    """The tables renderers read, one section per signal source (see the module's docstring)."""

    top_functions: tuple[TopFunction, ...] = ()
    gpu_devices: tuple[GpuDevice, ...] = ()
    gpu_mig_instances: tuple[MigInstance, ...] = ()
    torch_traces: tuple[dict[str, Any], ...] = ()
    trace_groups: TraceGroups | None = None
    ranks: dict[str, Any] | None = None
    requests: RequestsDetail | None = None
    llm: LlmDetail | None = None
    tail: TailDetail | None = None
    join: Joins = Joins()
    serving: ServingDetails | None = None

    def merged(self, other: Details) -> Details:
        """This with every section ``other`` wrote (one that differs from the default)."""
        defaults = Details()
        mine = {f: getattr(other, f) for f in self.__struct_fields__ if getattr(other, f) != getattr(defaults, f)}
        return msgspec.structs.replace(self, **mine) if mine else self

    def to_json(self) -> dict[str, Any]:
        """The section as findings.json holds it (numpy scalars as their numbers)."""
        out: dict[str, Any] = msgspec.to_builtins(self, enc_hook=scalar)
        return out


def scalar(obj: Any) -> Any:
    """A numpy scalar (a figure a signal computed with numpy) as its Python number; else TypeError."""
    item = getattr(obj, "item", None)
    if callable(item) and type(obj).__module__ == "numpy":
        return item()
    raise TypeError(f"not JSON: {type(obj).__name__}")


__all__ = ["Details", "GaugeDetail", "GpuDevice", "HistogramDetail", "JoinDetail", "JoinThread", "Joins",
           "LatencyStats", "LifetimeExcluded", "LlmDetail", "LlmPhases", "MigInstance", "NamedLatency", "RateDetail",
           "RequestsCoverage", "RequestsDetail", "ServingDetails", "ShareRow", "SizeAttribute", "SpanShare",
           "TailDetail", "TokenLatency", "TopFunction", "TraceGroup", "TraceGroups", "scalar"]

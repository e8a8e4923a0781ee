"""What the host reads of ``manifest.json``, as msgspec types decoded once per bundle (``Bundle.info``).

``Bundle.open`` has checked the shape analysis relies on (manifest.py ``manifest_problem``); the rest
of a hand-edited, older or hostile manifest is read field by field: a field of the wrong type or out
of range costs only that field (its default), a collector entry without a name only that entry.
Readers use attributes and never re-check types. ``manifest.py`` stays the standard-library
Manifest the capture and the agent write; this is the host side's read view of it.
"""
from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta, Struct, field

from diagnose.bundle.records.base import Count, Finite, lenient

S = TypeVar("S", bound=Struct)
ManifestNs = Annotated[int, Meta(ge=0, le=2**63 - 1)]  # the range manifest_problem admits
Short = Annotated[str, Meta(max_length=4096)]  # a name, a reason: never a megabyte of terminal text
Reading = Annotated[float, Meta(ge=0, lt=1e15)]  # a cost, count or budget: no reading comes near 1e15
SpanCount = Annotated[int, Meta(ge=0, le=2**63 - 1)]  # a span count or a Unix time in ns
SpanCost = Annotated[float, Meta(ge=0, lt=1e9)]  # the agent's span work: CPU s, % of a core


class CollectorEntry(Struct, frozen=True, kw_only=True):
    """One collector's status: ``state`` one of CollectorState's values (manifest_problem checked it)."""

    name: str
    state: str = "failed"
    reason: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    streams: tuple[str, ...] = ()

    def counts_as(self, cls: type[S]) -> S:
        """The counts this collector's reader knows, as ``cls`` (each field read leniently; a
        record that does not convert gives ``cls()``)."""
        return lenient(cls, self.counts) or cls()


class CollectorCounts(Struct, frozen=True, kw_only=True):
    """The counts the host reads of the collectors that report their own work (the in-target agent,
    the OTLP receiver): the agent's torch windows and their holds (diagnose/agent/inproc/windowplan.py),
    its span work and sampling (spanbudget.py), and the spans a producer dropped and when. Each field
    is None (or empty) when absent or unusable; the lists of pairs are checked entry by entry by
    their readers (signals/spans/coverage.py, sampling.py)."""

    torch_traces: Reading | None = None
    torch_window_s: Reading | None = None
    torch_hold_max_ms: Reading | None = None
    torch_hold_total_ms: Reading | None = None
    torch_hold_budget_ms: Reading | None = None
    torch_export_pending: bool = False
    torch_profiled_share_pct: Reading | None = None  # of the capture, under the duty cycle's budget
    torch_duty_budget_pct: Reading | None = None
    torch_profiled_budget_s: Reading | None = None
    spans_seen: SpanCount | None = None
    spans_kept: SpanCount | None = None
    spans_cpu_s: SpanCost | None = None
    spans_cpu_pct: SpanCost | None = None
    spans_cpu_budget_pct: SpanCost | None = None
    spans_keep_fraction: Finite | None = None
    spans_keep_history: list[Any] = field(default_factory=list)  # [Unix ns, fraction] pairs
    spans_dropped: SpanCount | None = None
    spans_dropped_ranges_ns: list[Any] | None = None  # [first, last] Unix ns per run of drops
    spans_first_start_ns: SpanCount | None = None
    spans_last_end_ns: SpanCount | None = None
    spans_window_ns: tuple[SpanCount, SpanCount] | None = None  # when the producer recorded spans


class TargetInfo(Struct, frozen=True, kw_only=True):
    """The process captured, as the capture resolved it from /proc (or an import left it)."""

    pid: Annotated[int, Meta(gt=0, lt=2**31)] | None = None
    name: Short | None = None
    exe: str | None = None
    cmdline: tuple[str, ...] = ()
    python: Short | None = None
    user: Short | None = None
    uid: Count | None = None
    host: Short | None = None
    create_time: Finite | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that were read (the shape of manifest ``target``, for views that take one)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return {k: v for k, v in out.items() if v is not None and v not in ([], ())}


class ToolInfo(Struct, frozen=True, kw_only=True):
    """The diagnose that wrote the bundle (manifest.py ``tool_identity``)."""

    name: str | None = None
    version: str | None = None
    python: str | None = None


class HostInfo(Struct, frozen=True, kw_only=True):
    """The capture host's facts (diagnose/capture/cost.py ``host_facts``)."""

    os: str | None = None
    machine: str | None = None
    cpu: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None


class CaptureCost(Struct, frozen=True, kw_only=True):
    """diagnose's own cost (diagnose/capture/cost.py): wall time, CPU of diagnose and its children, peak
    RSS, the host's CPUs and the CPU priority each collector ran at (name -> "nice 19", ...)."""

    wall_s: Reading | None = None
    diagnose_cpu_s: Reading | None = None
    children_cpu_s: Reading | None = None
    max_rss_bytes: Reading | None = None
    host_cpus: Reading | None = None
    parse_ahead_cpu_s: Reading | None = None  # the parsing child's CPU, counted in children_cpu_s
    collector_priority: dict[str, Any] = field(default_factory=dict)


class BudgetRates(Struct, frozen=True, kw_only=True):
    """The collectors' rates an overhead budget asked for or ended at (diagnose/capture/budget.py Rates)."""

    pyspy_hz: int | float | None = None
    process_hz: int | float | None = None


class BudgetChange(Struct, frozen=True, kw_only=True):
    """One change of rates the budget made (the py-spy rate it set, when it set one), and why."""

    pyspy_hz: int | float | None = None
    why: str = ""


class OverheadBudget(Struct, frozen=True, kw_only=True):
    """The overhead budget and what it gave up (diagnose/capture/budget.py ``OverheadBudget.to_json``)."""

    pct_of_core: Reading | None = None
    used_pct_of_core_max: Reading | None = None
    asked: BudgetRates = field(default_factory=BudgetRates)
    final: BudgetRates = field(default_factory=BudgetRates)
    changes: tuple[BudgetChange, ...] = ()


class CaptureOptionsInfo(Struct, frozen=True, kw_only=True):
    """The options the capture ran with that the analysis reads (diagnose/collectors CaptureOptions):
    py-spy's rate and window, the process collector's rate; a value outside what the CLI accepts is None."""

    rate_hz: Annotated[float, Meta(gt=0, le=100_000)] | None = None
    pyspy_window_s: Annotated[float, Meta(gt=0, lt=86_400)] | None = None
    process_hz: Annotated[float, Meta(ge=0.01, le=1000)] | None = None


class ManifestInfo(Struct, frozen=True, kw_only=True):
    """The manifest's fields the host reads. Times are Unix-epoch ns (None: not known, e.g. while
    capturing or for imported files without wall-clock time)."""

    target: TargetInfo = field(default_factory=TargetInfo)
    tool: ToolInfo = field(default_factory=ToolInfo)
    command: tuple[str, ...] = ()
    collectors: tuple[CollectorEntry, ...] = ()
    started_ns: ManifestNs | None = None
    ended_ns: ManifestNs | None = None
    end_reason: Short | None = None
    partial: bool = False
    options: CaptureOptionsInfo = field(default_factory=CaptureOptionsInfo)
    host: HostInfo = field(default_factory=HostInfo)
    cost: CaptureCost | None = None
    budget: OverheadBudget | None = None

    def collector(self, name: str) -> CollectorEntry | None:
        """The first entry of collector ``name``, or None when it did not run."""
        return next((c for c in self.collectors if c.name == name), None)

    @property
    def window_ns(self) -> tuple[int, int] | None:
        """(started_ns, ended_ns) when both are known and in order."""
        lo, hi = self.started_ns, self.ended_ns
        return (lo, hi) if lo is not None and hi is not None and hi > lo else None


def manifest_info(raw: Any) -> ManifestInfo:
    """The view of a decoded manifest (anything: a non-object gives the empty view)."""
    return lenient(ManifestInfo, raw) or ManifestInfo()


def target_info(raw: Any) -> TargetInfo:
    """The view of a manifest's ``target`` object (anything: a non-object gives the empty view)."""
    return lenient(TargetInfo, raw) or TargetInfo()


TARGET_EXITED = "target exited"  # ``end_reason`` of a capture whose target died before its end


__all__ = ["TARGET_EXITED", "BudgetChange", "BudgetRates", "CaptureCost", "CaptureOptionsInfo", "CollectorCounts",
           "CollectorEntry", "HostInfo", "ManifestInfo", "OverheadBudget", "TargetInfo", "ToolInfo", "manifest_info",
           "target_info"]

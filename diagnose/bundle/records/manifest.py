"""What the host reads of ``manifest.json``, as msgspec types decoded once per bundle (``Bundle.info``).

``Bundle.open`` has checked the shape analysis relies on (manifest.py ``manifest_problem``); the rest
of a hand-edited, older or hostile manifest is read field by field: a field of the wrong type or out
of range costs only that field (its default), a collector entry without a name only that entry.
Readers use attributes and never re-check types. ``manifest.py`` stays the standard-library
Manifest the capture and the agent write; this is the host side's read view of it.
"""
from __future__ import annotations

from typing import Annotated, Any, TypeVar, get_type_hints

import msgspec
from msgspec import Meta, Struct, field

from diagnose.bundle.records.base import Count, Finite

S = TypeVar("S", bound=Struct)
ManifestNs = Annotated[int, Meta(ge=0, le=2**63 - 1)]  # the range manifest_problem admits
Short = Annotated[str, Meta(max_length=4096)]  # a name, a reason: never a megabyte of terminal text


class CollectorEntry(Struct, frozen=True, kw_only=True):
    """One collector's status: ``state`` one of CollectorState's values (manifest_problem checked it)."""

    name: str
    state: str = "failed"
    reason: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    streams: tuple[str, ...] = ()


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


class CaptureCost(Struct, frozen=True, kw_only=True):
    """diagnose's own cost (diagnose/capture/cost.py): wall time, CPU of diagnose and its children, peak RSS."""

    wall_s: Annotated[float, Meta(ge=0, lt=1e15)] | None = None
    diagnose_cpu_s: Annotated[float, Meta(ge=0, lt=1e15)] | None = None
    children_cpu_s: Annotated[float, Meta(ge=0, lt=1e15)] | None = None
    max_rss_bytes: Annotated[float, Meta(ge=0, lt=1e15)] | None = None


class ManifestInfo(Struct, frozen=True, kw_only=True):
    """The manifest's fields the host reads. Times are Unix-epoch ns (None: not known, e.g. while
    capturing or for imported files without wall-clock time)."""

    target: TargetInfo = field(default_factory=TargetInfo)
    collectors: tuple[CollectorEntry, ...] = ()
    started_ns: ManifestNs | None = None
    ended_ns: ManifestNs | None = None
    end_reason: Short | None = None
    partial: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    cost: CaptureCost | None = None

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
    return _tolerant(ManifestInfo, raw) or ManifestInfo()


def _tolerant(cls: type[S], raw: Any) -> S | None:
    """``cls`` from the JSON object ``raw``, field by field: a field that does not convert keeps its
    default; None when ``raw`` is not an object or a required field is missing or wrong."""
    if not isinstance(raw, dict):
        return None
    hints = get_type_hints(cls, include_extras=True)
    kwargs: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name in raw:
            value = _field(hints[f.name], raw[f.encode_name])
            if value is not _WRONG:
                kwargs[f.name] = value
    try:
        return cls(**kwargs)
    except TypeError:  # a required field missing (or wrong)
        return None


_WRONG = object()
_NESTED: dict[Any, type[Struct]] = {}


def _field(tp: Any, value: Any) -> Any:
    if tp in _NESTED:  # a nested struct (or an optional one): read leniently in turn
        got = _tolerant(_NESTED[tp], value)
        return _WRONG if got is None else got
    if tp == tuple[CollectorEntry, ...]:  # one bad entry costs that entry
        return tuple(e for v in value if (e := _tolerant(CollectorEntry, v)) is not None) \
            if isinstance(value, list) else _WRONG
    try:
        return msgspec.convert(value, tp)
    except msgspec.ValidationError:
        return _WRONG


_NESTED.update({TargetInfo: TargetInfo, CaptureCost: CaptureCost, CaptureCost | None: CaptureCost})


__all__ = ["CaptureCost", "CollectorEntry", "ManifestInfo", "TargetInfo", "manifest_info"]

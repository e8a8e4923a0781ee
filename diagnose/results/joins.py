"""The join's section of Details (diagnose/signals/join.py): what the target's threads did (py-spy)
and which stage spans were open during the GPU's idle gaps (``gaps``) and the slowest requests or
steps (``slow``)."""
from __future__ import annotations

import msgspec


class ShareRow(msgspec.Struct, frozen=True, kw_only=True):
    """A frame category or function (``name``) by its share of the sampled time (%) and its seconds."""

    name: str
    share_pct: float
    seconds: float


class JoinThread(msgspec.Struct, frozen=True, kw_only=True):
    """One thread inside the windows: ``tid``, ``thread`` (name (tid)), its sampled seconds, the part
    not parked (``busy_pct``, % of them), its top ``categories`` and ``functions`` (% of its samples)."""

    tid: int
    thread: str
    sampled_s: float
    busy_pct: float
    categories: tuple[ShareRow, ...]
    functions: tuple[ShareRow, ...]


class SpanShare(msgspec.Struct, frozen=True, kw_only=True):
    """A non-root ``span`` name (and its ``stage``) by the share of the windows' time it was open (%)."""

    span: str
    stage: str | None
    share_pct: float


class JoinDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One set of windows joined (``kind``: gpu_gaps, torch_gaps, slow_requests, slow_steps): how many
    ``windows``, their merged length (``window_s``, s), the samples inside them (``sampled_s``, s), per
    thread busiest first (``threads``), the non-idle time by category (10) and function (5), the stage
    ``spans`` open, and the ``headline`` sentence. With no window only ``kind`` and ``windows`` (0)."""

    kind: str
    windows: int
    window_s: float | None = None
    sampled_s: float | None = None
    threads: tuple[JoinThread, ...] = ()
    categories: tuple[ShareRow, ...] = ()
    functions: tuple[ShareRow, ...] = ()
    spans: tuple[SpanShare, ...] = ()
    headline: str = ""


class Joins(msgspec.Struct, frozen=True, kw_only=True):
    """The GPU (or torch-op) idle gaps' join and the slowest requests' (else steps'); None without."""

    gaps: JoinDetail | None = None
    slow: JoinDetail | None = None


__all__ = ["JoinDetail", "JoinThread", "Joins", "ShareRow", "SpanShare"]

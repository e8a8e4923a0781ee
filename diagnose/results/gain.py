"""What a remedy should gain in this capture (diagnose/verdict/gain.py computes it) and the busiest
thread's time by term kind, the share Amdahl's law is applied to when one thread caps the service."""
from __future__ import annotations

from msgspec import Struct


class Band(Struct, frozen=True, kw_only=True):
    """A predicted ratio NEW / BASE, from the assumption's least to its most favourable end."""

    low: float
    high: float


class BusiestThread(Struct, frozen=True, kw_only=True):
    """The thread with the most sampled time off ``idle.work``: the one a saturated service funnels
    its requests through (an event loop, a model worker). ``kinds``: its own sampled time by account
    term kind (diagnose/account/kinds.py), as shares 0..1 of ``sampled_s`` (py-spy samples x /proc)."""

    tid: int
    sampled_s: float
    kinds: dict[str, float] = {}


class PredictedGain(Struct, frozen=True, kw_only=True):
    """One remedy's predicted gain for this capture.

    ``term``: the account term kind the remedy acts on; ``share`` (0..1): that term's share of the
    time the prediction scales (the busiest thread's, ``basis`` "busiest thread", or the account's
    busy time); ``removed``: the fraction of that time the remedy is assumed to remove (its kind's
    band, verdict/gain.py REMOVED). ``throughput_x``: predicted throughput NEW/BASE at saturation
    (None: the service is not saturated, throughput follows the offered load); ``p50_x``/``p99_x``:
    predicted request-latency ratios NEW/BASE from the stage spans (None without spans).
    ``method``: amdahl (1 / (1 - share x removed)), batching (roofline per-item time at the batch the
    queue allows, Little's law), cores (the time waiting for a core given back) or none (no load).
    ``assumption``: the one line the prediction rests on."""

    remedy: str
    term: str
    method: str
    basis: str = ""
    share: float = 0.0
    removed: Band | None = None
    throughput_x: Band | None = None
    p50_x: Band | None = None
    p99_x: Band | None = None
    assumption: str = ""


__all__ = ["Band", "BusiestThread", "PredictedGain"]

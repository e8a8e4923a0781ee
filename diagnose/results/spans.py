"""The stage spans' sections of Details (diagnose/signals/spans/: analytics.py ``request_summary``,
llm.py ``llm_summary``, tail.py ``tail_summary``): request latency, QPS and stage shares, LLM TTFT/TPOT,
the slowest 1%. A figure that was not measured is None, never 0."""
from __future__ import annotations

import msgspec


class LatencyStats(msgspec.Struct, frozen=True, kw_only=True):
    """Latency of ``count`` requests (ms; numpy's linear interpolation): mean, P50/P90/P95/P99/P999
    and max (None without requests)."""

    count: int
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None


class NamedLatency(LatencyStats, frozen=True, kw_only=True):
    """The latency of the requests (root spans) of one ``name``."""

    name: str


class LifetimeExcluded(msgspec.Struct, frozen=True, kw_only=True):
    """Server-lifetime root spans left out of the request statistics: ``count``, the ``rule``, the
    longest (``longest_s``, s) and their ``names`` (at most 10)."""

    count: int
    rule: str
    longest_s: float
    names: tuple[str, ...]


class RequestsCoverage(msgspec.Struct, frozen=True, kw_only=True):
    """The part of the recording window the kept spans cover when a producer dropped some
    (``covered_s`` of ``window_s``, s) and the ``spans_dropped``."""

    covered_s: float
    window_s: float
    spans_dropped: int


class RequestsDetail(msgspec.Struct, frozen=True, kw_only=True):
    """The requests (root spans) of the capture window: ``requests`` counted (with sampling,
    ``requests_estimated`` = requests x ``sampled_one_in``), ``window_s`` (s; the covered time when
    spans were dropped), ``qps``, ``latency``, ``errors``, in-flight requests measured (time-average
    ``in_flight_measured_mean`` and peak ``_max``) and by Little's law (``in_flight_littles_law``: QPS x
    mean latency), each stage's share of request time (``stage_share_pct``, %) and the part in no stage
    span (``unstaged_pct``), the latency per root name (``by_name``, the 10 most frequent), the
    server-lifetime roots left out (``lifetime_excluded``), ``ended_outside_window`` (requests, when none
    ended inside the capture window: QPS and in-flight are then None) and the spans' ``coverage``. With
    no request every figure but ``requests`` (0) and ``lifetime_excluded`` is None or empty."""

    requests: int
    requests_estimated: float | None = None
    sampled_one_in: int | None = None
    window_s: float | None = None
    qps: float | None = None
    latency: LatencyStats | None = None
    errors: int = 0
    in_flight_measured_mean: float | None = None
    in_flight_measured_max: float | None = None
    in_flight_littles_law: float | None = None
    stage_share_pct: dict[str, float | None] = {}
    unstaged_pct: float | None = None
    by_name: tuple[NamedLatency, ...] = ()
    lifetime_excluded: LifetimeExcluded | None = None
    ended_outside_window: int | None = None
    coverage: RequestsCoverage | None = None


class TokenLatency(msgspec.Struct, frozen=True, kw_only=True):
    """TTFT or TPOT over ``count`` generations: P50/P90/P99 (ms; None without any)."""

    count: int
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None


class LlmPhases(msgspec.Struct, frozen=True, kw_only=True):
    """The generations' time (``generation_s``, s) split at their first token, % of it: before it
    (``ttft_share_pct``; of it waiting in queue-stage spans, ``queue_share_pct``, the rest prefill,
    ``prefill_share_pct``) and after it (decode, ``decode_share_pct``)."""

    generation_s: float
    ttft_share_pct: float
    queue_share_pct: float
    prefill_share_pct: float
    decode_share_pct: float


class LlmDetail(msgspec.Struct, frozen=True, kw_only=True):
    """LLM latency from the spans: ``ttft``, ``tpot``, ``output_tokens`` (sampled: x N) and
    ``output_tokens_per_s`` over the window, and the generation ``phases`` (None without a TTFT)."""

    ttft: TokenLatency
    tpot: TokenLatency
    output_tokens: float
    output_tokens_per_s: float | None
    phases: LlmPhases | None


class SizeAttribute(msgspec.Struct, frozen=True, kw_only=True):
    """The numeric request ``attribute`` whose median grows most in the tail: its medians in the tail
    and over all requests, and their ``ratio`` (at least 1.5)."""

    attribute: str
    tail_median: float
    all_median: float
    ratio: float


class TailDetail(msgspec.Struct, frozen=True, kw_only=True):
    """The slowest 1% of ``requests`` (latency >= ``cut_ms``): each stage's share of their time and of
    all requests' (%), the stage they spend most in (``dominant_stage``) and the one that grows most
    (``grown_stage``), the ``size_attribute``, the share of tail and of all requests overlapping a GC
    pause (``gc_overlap_pct``, ``gc_overlap_all_pct``; None without a GC stream) and GC's share of the
    tail's time, and the tail's root ``names`` (name -> requests). With no request only ``requests`` (0)."""

    requests: int
    cut_ms: float | None = None
    stage_share_pct: dict[str, float] = {}
    all_stage_share_pct: dict[str, float] = {}
    dominant_stage: str | None = None
    grown_stage: str | None = None
    size_attribute: SizeAttribute | None = None
    gc_overlap_pct: float | None = None
    gc_overlap_all_pct: float | None = None
    gc_share_of_tail_time_pct: float | None = None
    names: dict[str, int] = {}


__all__ = ["LatencyStats", "LifetimeExcluded", "LlmDetail", "LlmPhases", "NamedLatency", "RequestsCoverage",
           "RequestsDetail", "SizeAttribute", "TailDetail", "TokenLatency"]

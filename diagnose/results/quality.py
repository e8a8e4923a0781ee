"""DataQuality: how well the capture measured, one section per signal source (findings.json
``data_quality``).

Each signal source returns its own section (diagnose/signals/base.py SourceResult), ``extract``
(diagnose/signals/__init__.py) adds the bundle's stream figures and the capture's length, the verdict
(diagnose/verdict/analyze.py) the analysis' own section and the warnings. A section is None when its
source did not run or failed (``streams.source_errors`` names it); inside a section a number that was
not measured is None, never 0. Units are in the field names (``_ms``, ``_s``, ``_hz``, ``_pct``).
"""
from __future__ import annotations

from typing import Any

import msgspec


class PyspyQuality(msgspec.Struct, frozen=True, kw_only=True):
    """py-spy's sampling (diagnose/signals/cpu.py pyspy_quality; rate: signals/pyspy_rate.py).

    From the PYSPY index (one record per window) and the windows' chrometraces: ``windows`` indexed,
    ``unreadable_windows`` whose file is missing or not a regular file, ``samples`` and ``errors``
    (py-spy's own counts, summed), ``error_ratio`` errors / (samples + errors); the gap between one
    window's last event and the next one's origin (``gap_between_windows_ms_max``/``_mean``, ms) and the
    largest error of a window's clock alignment (``clock_alignment_error_ms_max``, ms: its origin's
    uncertainty). ``stack_segments``: stacks on the Unix clock the timeline joins (the agent's own
    threads left out). Rate, over the windows whose rate was asked: ``requested_hz`` (``--rate``, else
    the highest asked), ``asked_hz`` (the highest asked of py-spy: the overhead budget may lower it),
    ``achieved_hz_per_thread`` (samples / thread-seconds), ``achieved_share_pct`` (of requested),
    ``achieved_share_of_asked_pct``, ``threads_max`` read in one round, ``windows_overran`` (sampled
    longer than asked); ``undersampled`` and ``overran``: the statements, when so."""

    windows: int = 0
    unreadable_windows: int = 0
    samples: int = 0
    errors: int = 0
    error_ratio: float | None = None
    gap_between_windows_ms_max: float | None = None
    gap_between_windows_ms_mean: float | None = None
    clock_alignment_error_ms_max: float | None = None
    stack_segments: int = 0
    requested_hz: float | None = None
    asked_hz: float | None = None
    achieved_hz_per_thread: float | None = None
    achieved_share_pct: float | None = None
    achieved_share_of_asked_pct: float | None = None
    threads_max: int | None = None
    windows_overran: int | None = None
    undersampled: str | None = None
    overran: str | None = None


class ProcessQuality(msgspec.Struct, frozen=True, kw_only=True):
    """The process collector's readings (PROCESS stream; gaps: diagnose/signals/process_gaps.py):
    ``records`` read; ``gaps``: readings missing for longer than 3 intervals (None with fewer than
    two readings), the longest (``gap_max_s``) and their total (``gaps_total_s``), in s, and the
    statement (``gaps_statement``) when there is one."""

    records: int = 0
    gaps: int | None = None
    gap_max_s: float | None = None
    gaps_total_s: float | None = None
    gaps_statement: str | None = None


class GpuQuality(msgspec.Struct, frozen=True, kw_only=True):
    """The GPU counters (diagnose/signals/gpu.py): ``counters`` which GPUs the signals describe (the
    target's, all of them and why, or ``unavailable``); NVML ``nvml_readings`` (records),
    ``nvml_malformed_records`` (the NVML stream's dropped records), the median poll interval
    (``nvml_poll_interval_ms_median``, ms) and the median age of a reading's newest sample
    (``nvml_newest_sample_age_ms_median``, ms); GPM ``gpm_intervals``; DCGM ``dcgm_scrapes``,
    ``dcgm_scrape_errors`` and the exporter's host labels (``dcgm_exporter_hosts``: another host than
    the target's means another node's GPUs). None without any GPU stream."""

    counters: str = "unavailable"
    nvml_readings: int | None = None
    nvml_malformed_records: int | None = None
    nvml_poll_interval_ms_median: float | None = None
    nvml_newest_sample_age_ms_median: float | None = None
    gpm_intervals: int | None = None
    dcgm_scrapes: int | None = None
    dcgm_scrape_errors: int | None = None
    dcgm_exporter_hosts: tuple[str, ...] | None = None


class TorchQuality(msgspec.Struct, frozen=True, kw_only=True):
    """The torch profiler traces (diagnose/signals/timeline.py): ``traces`` read, ``trace_errors``
    (a trace that could not be read, one line each), ``trace_damage`` (events dropped or repaired,
    per file), ``trace_late`` (a window still exporting when attach stopped waiting), ``traces_apart``
    (traces that do not belong together, analysed apart), ``ranks_not_compared`` (why there is no job
    of several ranks, or the traces left out of it), ``ranks_notes`` (the job analysis' notes) and
    ``device_not_recorded`` (traces that launched device work but recorded no kernel activity, one line
    each: diagnose/traces/report.py TraceReport.device_not_recorded)."""

    traces: int = 0
    trace_errors: tuple[str, ...] = ()
    trace_damage: tuple[str, ...] = ()
    trace_late: str | None = None
    traces_apart: str | None = None
    ranks_not_compared: str | None = None
    ranks_notes: tuple[str, ...] = ()
    device_not_recorded: tuple[str, ...] = ()  # traces that launched device work but recorded none of it


class SpansCoverage(msgspec.Struct, frozen=True, kw_only=True):
    """Spans a producer dropped (diagnose/signals/spans/coverage.py): ``spans_dropped`` by its count,
    the recording ``window_s`` and the part the kept spans cover (``covered_s``, s;
    ``covered_share_pct``), the kept spans' first start and last end (Unix ns), the gaps with no
    span (``gaps_ns``, [start, end] Unix ns, at most 32), whether the producer said when it dropped
    (``drop_times_known``), the ``producers`` and the ``statement``."""

    spans_dropped: int
    window_s: float
    covered_s: float
    covered_share_pct: float | None
    kept_first_start_ns: int | None
    kept_last_end_ns: int | None
    gaps_ns: tuple[tuple[int, int], ...]
    drop_times_known: bool
    producers: tuple[str, ...]
    statement: str


class SpansSampling(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's span sampling (diagnose/signals/spans/sampling.py): 1 in ``one_in`` traces kept
    (``keep_fraction``), its ``history`` ([Unix ns, fraction] at each change), spans ended in the
    target (``spans_seen``) and kept (``spans_kept``) by the agent's count, spans in the stream the
    analysis left out (``spans_left_out``, written under a higher fraction), the agent's span work
    (``agent_span_cpu_s``, s; ``agent_span_cpu_pct`` of one core) and its budget
    (``agent_span_cpu_budget_pct``), and the ``statement``."""

    one_in: int
    keep_fraction: float
    history: tuple[tuple[int, float], ...]
    spans_seen: int | None
    spans_kept: int | None
    spans_left_out: int
    agent_span_cpu_s: float | None
    agent_span_cpu_pct: float | None
    agent_span_cpu_budget_pct: float | None
    statement: str


class SpansQuality(msgspec.Struct, frozen=True, kw_only=True):
    """The stage spans (SPANS stream, diagnose/signals/timeline.py and signals/spans/): ``count``
    parsed, ``invalid`` left out by reason (no_end_time, bad_time, time_out_of_range, bad_id,
    end_before_start, longer_than_24h), ``requests_excluded`` (server-lifetime root spans left out of
    the request statistics), ``coverage`` (spans a producer dropped), ``sampling`` and ``sampled``
    (the agent's sampling and its statement), ``outside_window`` (no request ended inside the
    capture window), ``repeated_ids`` (spans that repeat another's trace and span id)."""

    count: int = 0
    invalid: dict[str, int] = {}
    requests_excluded: str | None = None
    repeated_ids: str | None = None
    coverage: SpansCoverage | None = None
    sampling: SpansSampling | None = None
    sampled: str | None = None
    outside_window: str | None = None


class ServingQuality(msgspec.Struct, frozen=True, kw_only=True):
    """The serving engine's /metrics scrapes (diagnose/signals/serving.py): ``scrapes`` in the
    window, ``scrape_errors`` (failed scrapes), ``garbage_lines`` (malformed metric lines skipped);
    ``reason``: why there is no usable scrape (then ``scrapes`` is 0)."""

    scrapes: int = 0
    scrape_errors: int | None = None
    garbage_lines: int | None = None
    reason: str | None = None


class StreamsQuality(msgspec.Struct, frozen=True, kw_only=True):
    """What reading the bundle cost (diagnose/bundle/reader.py, signals/__init__.py extract,
    account/__init__.py): per stream file, ``torn_lines`` (not JSON) and ``invalid_records`` (of the
    wrong shape) skipped; ``unreadable_members`` never read and why (a FIFO, a device, a symlink);
    ``source_errors`` (signal source -> error: its signals are unknown) and ``account_errors``
    (account -> error: that account is left out)."""

    torn_lines: dict[str, int] = {}
    invalid_records: dict[str, int] = {}
    unreadable_members: dict[str, str] = {}
    source_errors: dict[str, str] = {}
    account_errors: dict[str, str] = {}


class InFlightCheck(msgspec.Struct, frozen=True, kw_only=True):
    """In-flight requests two ways (diagnose/verdict/analyze.py in_flight_check): accepted TCP
    connections (``tcp_connections_mean``, process collector) against the spans' Little's law
    (``spans_littles_law``: QPS x mean latency), their ``ratio`` and what it means (``reading``)."""

    tcp_connections_mean: float
    spans_littles_law: float
    ratio: float
    reading: str


class AnalysisQuality(msgspec.Struct, frozen=True, kw_only=True):
    """How the analysis ran (diagnose/verdict/analyze.py): the ``--thresholds`` rule overrides
    (``threshold_overrides``, rule:threshold -> value) and analysis parameters that differ from the
    defaults (``params``, key -> value, in the key's unit), and the ``in_flight_check``."""

    threshold_overrides: dict[str, float] = {}
    params: dict[str, float] = {}
    in_flight_check: InFlightCheck | None = None


class QualityWarning(msgspec.Struct, frozen=True):
    """A statement of what the capture did not measure as asked (diagnose/verdict/data_quality.py),
    with the collectors it concerns."""

    collectors: tuple[str, ...]
    text: str


class DataQuality(msgspec.Struct, frozen=True, kw_only=True):
    """How well the capture measured: ``capture_s`` (manifest end - start, s; None when either is
    unknown), one section per source (None: that source did not run or failed), the bundle's
    ``streams`` and the ``analysis``' own figures, and the ``warnings`` gathered from the sections
    (the report's first screen says each)."""

    capture_s: float | None = None
    pyspy: PyspyQuality | None = None
    process: ProcessQuality | None = None
    gpu: GpuQuality | None = None
    torch: TorchQuality | None = None
    spans: SpansQuality | None = None
    serving: ServingQuality | None = None
    streams: StreamsQuality = StreamsQuality()
    analysis: AnalysisQuality = AnalysisQuality()
    warnings: tuple[QualityWarning, ...] = ()

    def figures(self) -> list[tuple[str, Any]]:
        """Every measured figure but the warnings, in field order, as (``section field``, value):
        ``capture s``, ``pyspy windows``, ``streams torn lines`` ... (None and empty values left out;
        records, tuples and dicts as they are in JSON: dicts and lists)."""
        out: list[tuple[str, Any]] = []
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if name == "warnings" or value is None:
                continue
            if not isinstance(value, msgspec.Struct):
                out.append((name.replace("_", " "), value))
                continue
            for field in value.__struct_fields__:
                v = getattr(value, field)
                if v not in (None, {}, (), []):
                    label = f"{name} {field}".replace("_", " ")
                    out.append((label, v if isinstance(v, (str, int, float)) else msgspec.json.decode(
                        msgspec.json.encode(v))))
        return out

    def merged(self, other: DataQuality) -> DataQuality:
        """This with every section ``other`` has (a source's result laid over what came before)."""
        mine = {f: getattr(other, f) for f in SOURCE_SECTIONS if getattr(other, f) is not None}
        return msgspec.structs.replace(self, **mine) if mine else self


# The sections a signal source returns (the others belong to extract and the verdict).
SOURCE_SECTIONS = ("pyspy", "process", "gpu", "torch", "spans", "serving")


__all__ = ["SOURCE_SECTIONS", "AnalysisQuality", "DataQuality", "GpuQuality", "InFlightCheck", "ProcessQuality",
           "PyspyQuality", "QualityWarning", "ServingQuality", "SpansCoverage", "SpansQuality", "SpansSampling",
           "StreamsQuality", "TorchQuality"]

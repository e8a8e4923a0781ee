"""What an export sends: the verdict, the quadrant shares ("Where the time went"), the key metrics,
diagnose's own capture cost and the findings of one Report, as typed points with OTel names and units.

Pure: reads the Report (its analysis, its manifest, its SPANS stream for the service name); the
exporters (diagnose/export/otlp.py, prometheus.py) only send what this builds. Metric names are in
the ``diagnose.`` namespace; units are UCUM as the OpenTelemetry semantic conventions write them:
``s`` (latencies and CPU time, converted from the analysis' ms), ``1`` (shares and activities,
converted from %), ``{request}/s``, ``{token}/s``, ``By``. Percentiles are gauges with a
``percentile`` attribute (p50, p90, p99, p999), not ``quantile``: Prometheus reserves that label
for summaries, and these are the capture's measured values, not a summary's streaming estimate.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from diagnose.bundle.records.manifest import CaptureCost, ManifestInfo
from diagnose.bundle.streams import SPANS
from diagnose.model import Account, Analysis, Finding, Report, Severity
from diagnose.results.traces import trace_views

Attrs = tuple[tuple[str, str], ...]
MAX_PLAUSIBLE = 1e15  # no cost, count or latency in a manifest comes near it: a larger one is not a reading
SERVICE_SPANS_SCANNED = 10_000  # spans read for the service name (the most common one among them)
MAX_NAME_CHARS = 256  # a resource value from the target (its spans' service.name) is cut to this


@dataclass(frozen=True)
class Point:
    """One gauge reading: ``name`` (OTel, dotted), ``unit`` (UCUM), ``value`` in that unit."""

    name: str
    unit: str
    description: str
    value: float
    attributes: Attrs = ()


@dataclass(frozen=True)
class FindingRecord:
    """One finding as a log record: ``body`` is its title; ``evidence`` one line per compared signal
    ("signal=value unit op threshold")."""

    rule_id: str
    title: str
    summary: str
    severity: Severity
    layer: str
    quadrant: str  # "secondary" for data-quality and note findings
    evidence: tuple[str, ...]
    evidence_points: tuple[Point, ...]  # the same evidence as readings, units differing: Prometheus only


@dataclass(frozen=True)
class Snapshot:
    """Everything one export sends. ``resource``: service.name, host.name, process.pid, rank and
    the user's ``--export-attr`` pairs (the user's win); ``time_ns``: the capture's end (Unix ns)."""

    resource: dict[str, str | int]
    points: tuple[Point, ...]
    findings: tuple[FindingRecord, ...]
    time_ns: int | None


def snapshot(report: Report, extra: dict[str, str] | None = None) -> Snapshot:
    """The Snapshot of ``report``; ``extra`` resource attributes override the derived ones."""
    a, m = report.analysis, report.bundle.info
    points = (*_verdict_points(a), *_account_points(a.accounts), *_key_metric_points(a), *_cost_points(m),
              *_finding_counts(a.findings))
    return Snapshot({**resource_attributes(report), **(extra or {})}, points,
                    tuple(_finding_record(f) for f in a.findings), m.ended_ns or None)


def resource_attributes(report: Report) -> dict[str, str | int]:
    """service.name (the spans' resource when recorded, else the target's process name),
    host.name, process.pid, and ``rank`` when every torch trace names the same one."""
    target = report.bundle.info.target
    name = _service(report) or (target.name or "unknown_service")[:MAX_NAME_CHARS]
    out: dict[str, str | int] = {"service.name": name}
    if target.host:
        out["host.name"] = target.host[:MAX_NAME_CHARS]
    if target.pid is not None:
        out["process.pid"] = target.pid
    ranks = {tr.rank for tr in trace_views(report.analysis.details.torch_traces)}
    rank = next(iter(ranks)) if len(ranks) == 1 else None
    if rank is not None:
        out["rank"] = rank
    return out


def _service(report: Report) -> str | None:
    names: Counter[str] = Counter()
    for i, rec in enumerate(report.bundle.typed(SPANS)):
        if i >= SERVICE_SPANS_SCANNED:
            break
        s = rec.service
        if s:
            names[s[:MAX_NAME_CHARS]] += 1
    return names.most_common(1)[0][0] if names else None


def _num(v: Any) -> float | None:
    """A finite, plausible number (a hostile or torn manifest: anything else is None)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not -MAX_PLAUSIBLE < v < MAX_PLAUSIBLE:
        return None  # the comparison also refuses NaN, infinities and ints too large for a float
    return float(v)


def _verdict_points(a: Analysis) -> list[Point]:
    v = a.verdict
    attrs = (("quadrant", v.quadrant.value), ("layer", v.layer.value if v.layer else "none"),
             ("account", v.account or "none"))
    out = [Point("diagnose.verdict.confidence", "1", "the verdict's confidence (0..1); its quadrant and layer are "
                 "the attributes", v.confidence, attrs)]
    shares = a.accounts[0].shares() if a.accounts else v.scores
    out += [Point("diagnose.quadrant.share", "1", "share of the limiting resource's time per quadrant (0..1)", s,
                  (("quadrant", q.value), ("account", a.accounts[0].resource if a.accounts else v.account or "none")))
            for q, s in sorted(shares.items(), key=lambda kv: kv[0].value)]
    return out


def _account_points(accounts: tuple[Account, ...]) -> list[Point]:
    """Every term of every account (Where the time went), and what no term accounts for."""
    from diagnose.render.account import account_rows_of

    out: list[Point] = []
    for acc in accounts:
        which = (("account", acc.resource), ("account_title", acc.title))  # two GPU accounts differ by title
        out.append(Point("diagnose.account.time", "s", "seconds the account partitions (thread-, GPU- or "
                         "request-seconds)", acc.total_s, which))
        for r in account_rows_of(acc, min_share=0.0):
            out.append(Point("diagnose.account.share", "1", "a term's share of its account's time (0..1)",
                             r.share_pct / 100.0, (*which, ("term", r.term), ("quadrant", r.quadrant),
                                                   ("layer", r.layer))))
    return out


# (signal, OTel name, unit, scale from the signal's unit, description, attributes)
KEY_METRICS: tuple[tuple[str, str, str, float, str, Attrs], ...] = (
    ("spans.qps", "diagnose.request.rate", "{request}/s", 1.0, "QPS: requests ended per second of the capture", ()),
    *(("spans." + q + "_ms", "diagnose.request.duration", "s", 1e-3, "request latency percentile (root spans)",
       (("percentile", q),)) for q in ("p50", "p90", "p99", "p999")),
    *(("llm.ttft_" + q + "_ms", "diagnose.gen_ai.time_to_first_token", "s", 1e-3, "TTFT percentile",
       (("percentile", q),)) for q in ("p50", "p99")),
    *(("llm.tpot_" + q + "_ms", "diagnose.gen_ai.time_per_output_token", "s", 1e-3, "TPOT percentile",
       (("percentile", q),)) for q in ("p50", "p99")),
    ("llm.output_tokens_per_s", "diagnose.gen_ai.output_tokens.rate", "{token}/s", 1.0, "output tokens per second", ()),
    ("gpu.sm_active_pct", "diagnose.gpu.sm.activity", "1", 1e-2, "GPU SM activity (0..1)", ()),
    ("gpu.dram_active_pct", "diagnose.gpu.dram.activity", "1", 1e-2, "GPU DRAM activity (0..1)", ()),
    ("cpu.process_util_pct", "diagnose.process.cpu.utilization", "1", 1e-2,
     "the target's CPU, 1 = one core", ()),
)


_ENGINE = "the serving engine's /metrics (--metrics)"
# the serving engine's own signals (diagnose/signals/serving.py), same table layout as KEY_METRICS
SERVING_METRICS: tuple[tuple[str, str, str, float, str, Attrs], ...] = (
    ("serving.qps", "diagnose.request.rate", "{request}/s", 1.0, "QPS: requests ended per second of the capture", ()),
    *(("serving.ttft_" + q + "_ms", "diagnose.gen_ai.time_to_first_token", "s", 1e-3, "TTFT percentile",
       (("percentile", q),)) for q in ("p50", "p99")),
    *(("serving.tpot_" + q + "_ms", "diagnose.gen_ai.time_per_output_token", "s", 1e-3, "TPOT percentile",
       (("percentile", q),)) for q in ("p50", "p99")),
    *(("serving.itl_" + q + "_ms", "diagnose.gen_ai.inter_token_latency", "s", 1e-3,
       f"ITL percentile (gap between consecutive output tokens), {_ENGINE}", (("percentile", q),))
      for q in ("p50", "p99")),
    ("serving.output_tokens_per_s", "diagnose.gen_ai.output_tokens.rate", "{token}/s", 1.0, "output tokens per second",
     ()),
    *(("serving.kv_cache_usage_" + s + "_pct", "diagnose.serving.kv_cache.usage", "1", 1e-2,
       f"KV-cache usage (0..1) over the scrapes, {_ENGINE}", (("statistic", s),)) for s in ("mean", "max")),
    ("serving.preemptions_per_s", "diagnose.serving.preemption.rate", "{preemption}/s", 1.0,
     f"requests preempted per second (KV cache full), {_ENGINE}", ()),
    ("serving.queue_share_pct", "diagnose.serving.queue.share", "1", 1e-2,
     f"engine queue time's share of end-to-end request latency (0..1), {_ENGINE}", ()),
    *(("serving.in_flight_" + s, "diagnose.serving.requests.in_flight", "{request}", 1.0,
       f"requests in the engine (running + waiting) over the scrapes, {_ENGINE}", (("statistic", s),))
      for s in ("mean", "max")),
)
SOURCE_SPANS, SOURCE_ENGINE = "spans", "engine"  # the ``source`` attribute when both measured one metric


def _measured(a: Analysis, table: tuple[tuple[str, str, str, float, str, Attrs], ...], source: str) -> list[Point]:
    out = []
    for signal, name, unit, scale, desc, attrs in table:
        s = a.signals.get(signal)
        value = _num(s.value) if s is not None else None
        if value is not None:
            out.append(Point(name, unit, desc, value * scale, (*attrs, ("source", source))))
    return out


def _key_metric_points(a: Analysis) -> list[Point]:
    """Only what was measured: a missing signal is left out, never sent as 0. The span-based
    metrics, then the serving engine's (``--metrics``); where both measured a metric (QPS,
    TTFT, TPOT, output tokens/s) each point carries ``source`` = ``spans`` or ``engine``."""
    points = _measured(a, KEY_METRICS, SOURCE_SPANS) + _measured(a, SERVING_METRICS, SOURCE_ENGINE)
    sources: dict[tuple[str, Attrs], set[str]] = {}
    for p in points:
        sources.setdefault((p.name, p.attributes[:-1]), set()).add(p.attributes[-1][1])
    return [p if len(sources[(p.name, p.attributes[:-1])]) > 1 else Point(p.name, p.unit, p.description, p.value,
                                                                           p.attributes[:-1])
            for p in points]


def _cost_points(m: ManifestInfo) -> list[Point]:
    """diagnose's own cost (manifest ``cost``, diagnose/capture/cost.py) and the capture's end time."""
    cost = m.cost or CaptureCost()
    wall, own, kids, rss = cost.wall_s, cost.diagnose_cpu_s, cost.children_cpu_s, cost.max_rss_bytes
    out = []
    if wall is not None and wall > 0:
        out.append(Point("diagnose.capture.duration", "s", "wall time of the capture", wall))
    for who, v in (("diagnose", own), ("children", kids)):
        if v is not None and v >= 0:
            out.append(Point("diagnose.capture.cpu.time", "s", "CPU diagnose used for the capture (children: py-spy, "
                             "the live view's analyses)", v, (("process", who),)))
    if wall and own is not None and own >= 0:
        out.append(Point("diagnose.capture.cpu.utilization", "1", "diagnose's CPU over the capture, 1 = one core",
                         own / wall))
    if rss is not None and rss > 0:
        out.append(Point("diagnose.capture.memory.peak", "By", "diagnose's peak resident memory", rss))
    ended = m.ended_ns
    if ended:
        out.append(Point("diagnose.capture.end_time", "s", "when the capture ended (Unix seconds)", ended / 1e9))
    return out


def _finding_counts(findings: tuple[Finding, ...]) -> list[Point]:
    counts = Counter(f.severity for f in findings)
    return [Point("diagnose.findings", "{finding}", "findings per severity", float(counts.get(s, 0)),
                  (("severity", s.value),)) for s in Severity]


def _finding_record(f: Finding) -> FindingRecord:
    quadrant = f.quadrant.value if f.quadrant else "secondary"
    lines = tuple(f"{e.signal}={e.value:g} {e.unit} {e.op} {e.threshold:g}".replace("  ", " ") for e in f.evidence)
    pts = tuple(Point("diagnose.finding.evidence", "", "a signal a rule compared with its threshold, in the "
                      "signal's unit (its attribute)", v, (("rule_id", f.rule_id), ("signal", e.signal),
                                                           ("unit", e.unit), ("op", e.op),
                                                           ("threshold", f"{e.threshold:g}")))
                for e in f.evidence if (v := _num(e.value)) is not None)
    return FindingRecord(f.rule_id, f.title, f.summary, f.severity, f.layer.value, quadrant, lines, pts)


__all__ = ["FindingRecord", "KEY_METRICS", "Point", "SERVING_METRICS", "Snapshot", "resource_attributes", "snapshot"]

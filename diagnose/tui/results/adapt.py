"""Analysis + manifest -> ResultsVM. Pure: no I/O, no Textual, no clock.

Everything is driven by what the Analysis holds, so signals added by other sources (``gpu.*``,
``spans.*``, ``llm.*``, ``kernels.*``) and their ``details`` tables appear without changes here;
what is absent is shown as "not captured" with the reason the analysis or the manifest gives.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from diagnose.bundle.records.manifest import ManifestInfo
from diagnose.model import JUDGED_QUADRANTS, Analysis, Finding, NotJudged, Quadrant, Signal, StackShare, Verdict
from diagnose.results.quality import DataQuality
from diagnose.rules import LAYER_PLAN
from diagnose.tui.results.adapt_gaps import gaps_view
from diagnose.tui.text import fmt_cell, fmt_value, humanize, printable, split_family, utc_datetime, utc_time
from diagnose.tui.viewmodels import (
    BarGroupVM,
    BarVM,
    EvidenceRow,
    FindingVM,
    QuadrantCell,
    ResultsVM,
    StackNodeVM,
    TableVM,
    VerdictVM,
)

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
# Families shown first in the breakdown tab: request stages before CPU categories.
FAMILY_ORDER = ("spans.", "llm.", "kernels.", "gpu.", "torch.", "cpu.")
LATENCY_PREFIXES = ("spans.", "llm.")
_PERCENTILE = re.compile(r"\.p(\d+)_ms$")
# verdict.decide() writes "<quadrant>-bound: act on the <layer> layer first (plan: ...). <lead>"
_HEADLINE_PREFIX = re.compile(r"^\w+-bound(, with [^:]*)?: act on the \w+ layer first \(plan: [^)]*\)\.\s*")
MAX_DETAIL_ROWS = 200


def verdict_vm(v: Verdict, provisional: bool = False) -> VerdictVM:
    plan = tuple(layer.value for layer in LAYER_PLAN.get(v.quadrant, ()))
    cells = tuple(QuadrantCell(q.value, float(v.scores.get(q, 0.0)), q == v.quadrant)
                  for q in JUDGED_QUADRANTS)
    summary = _HEADLINE_PREFIX.sub("", v.headline, count=1) or v.headline
    return VerdictVM(v.quadrant.value, v.layer.value if v.layer else None, plan, v.confidence,
                     v.headline, cells, summary, provisional)


def capture_window(info: ManifestInfo) -> str:
    start, end = info.started_ns, info.ended_ns
    if start and end:
        return f"whole capture, {utc_time(start)} → {utc_time(end)} ({(end - start) / 1e9:.2f} s)"
    if start:
        return f"capture so far, from {utc_time(start)}"
    return "whole capture"


def finding_vm(f: Finding, window: str) -> FindingVM:
    evidence = tuple(
        EvidenceRow(e.signal, fmt_value(e.value, e.unit), f"{e.op} {fmt_value(e.threshold, e.unit)}",
                    e.source)
        for e in f.evidence)
    return FindingVM(f.rule_id, f.title, f.summary, f.quadrant.value if f.quadrant else "secondary",
                     f.layer.value, f.severity.value, f.confidence, evidence, f.suggestions, window)


def sorted_findings(findings: Iterable[Finding], window: str) -> tuple[FindingVM, ...]:
    """Most severe first, then most confident (the rule engine's own order breaks ties)."""
    ranked = sorted(enumerate(findings),
                    key=lambda kv: (SEVERITY_RANK.get(kv[1].severity.value, 9), -kv[1].confidence, kv[0]))
    return tuple(finding_vm(f, window) for _, f in ranked)


def stack_tree(stacks: Iterable[StackShare]) -> tuple[StackNodeVM, ...]:
    """Merge the top stacks into one tree per thread (root frame first), shares summed."""
    by_thread: dict[str, list[StackShare]] = defaultdict(list)
    for s in stacks:
        by_thread[s.thread].append(s)
    roots = [StackNodeVM(f"thread {thread}", sum(s.share_pct for s in group), None,
                         tuple(_fold(n) for n in _merge([(s.frames, s.share_pct, s.category)
                                                         for s in group])))
             for thread, group in by_thread.items()]
    return tuple(sorted(roots, key=lambda n: -n.share_pct))


def _fold(node: StackNodeVM) -> StackNodeVM:
    """Collapse a chain of single-child frames (thread bootstrap, server plumbing) into its
    innermost frame, so the branching part of the tree fits an 80-column terminal."""
    hidden = 0
    while len(node.children) == 1 and node.category is None:
        node, hidden = node.children[0], hidden + 1
    label = f"{node.label}  [+{hidden} outer frame{'s' if hidden > 1 else ''}]" if hidden else node.label
    return StackNodeVM(printable(label), node.share_pct, node.category, tuple(_fold(c) for c in node.children))


def _merge(paths: list[tuple[tuple[str, ...], float, str]]) -> tuple[StackNodeVM, ...]:
    groups: dict[str, list[tuple[tuple[str, ...], float, str]]] = defaultdict(list)
    for frames, share, cat in paths:
        if frames:
            groups[frames[0]].append((frames[1:], share, cat))
    nodes = []
    for label, rest in groups.items():
        leaf_cats = [cat for frames, _, cat in rest if not frames]
        nodes.append(StackNodeVM(label, sum(share for _, share, _ in rest),
                                 leaf_cats[0] if leaf_cats else None, _merge(rest)))
    return tuple(sorted(nodes, key=lambda n: -n.share_pct))


def table_from_rows(title: str, rows: Any, empty: str = "") -> TableVM:
    """A details value as a table: list of dicts, dict of scalars, or a bare value."""
    if isinstance(rows, dict):
        return TableVM(title, ("name", "value"),
                       tuple((str(k), fmt_cell(v)) for k, v in rows.items()), empty or "empty")
    if not isinstance(rows, (list, tuple)):
        return TableVM(title, ("value",), ((fmt_cell(rows),),), empty)
    columns: list[str] = []
    for row in rows:
        for k in (row.keys() if isinstance(row, dict) else ()):
            if k not in columns:
                columns.append(str(k))
    if not columns:
        return TableVM(title, ("value",), tuple((fmt_cell(r),) for r in rows[:MAX_DETAIL_ROWS]),
                       empty or "empty")
    body = tuple(tuple(fmt_cell(r.get(c)) if isinstance(r, dict) else "" for c in columns)
                 for r in rows[:MAX_DETAIL_ROWS])
    return TableVM(title, tuple(columns), body, empty or "empty")


def bar_groups(signals: dict[str, Signal]) -> tuple[BarGroupVM, ...]:
    """Every family of bracketed percentage signals (``x.y_pct[key]``) as one bar group."""
    families: dict[str, list[Signal]] = defaultdict(list)
    for s in signals.values():
        base, key = split_family(s.name)
        if key is not None and s.unit == "%":
            families[base].append(s)
    groups = []
    for base, members in families.items():
        known = sorted((s for s in members if s.known), key=lambda s: -(s.value or 0.0))
        bars = tuple(BarVM(split_family(s.name)[1] or s.name, s.value, fmt_value(s.value, s.unit))
                     for s in known)
        groups.append(BarGroupVM(humanize(base), members[0].source, bars,
                                 _unknown_note([s for s in members if not s.known], bool(known))))
    rank = {p: i for i, p in enumerate(FAMILY_ORDER)}
    return tuple(sorted(groups, key=lambda g: (not g.bars, next(
        (rank[p] for p in FAMILY_ORDER if g.title.startswith(p.rstrip("."))), 99), g.title)))


def _unknown_note(unknown: list[Signal], some_known: bool) -> str:
    if not unknown:
        return ""
    keys = ", ".join(split_family(s.name)[1] or s.name for s in unknown)
    reasons = sorted({s.reason or "no reason given" for s in unknown})
    head = f"unknown: {keys}" if some_known else "not measured"
    return f"{head}: {'; '.join(reasons)}"


def latency_table(a: Analysis) -> TableVM:
    """Latency percentiles (P50..P999 in order), QPS, TTFT/TPOT: unbracketed spans.*/llm.* signals."""
    picked = [s for s in a.signals.values()
              if s.name.startswith(LATENCY_PREFIXES) and split_family(s.name)[1] is None]

    def order(s: Signal) -> tuple[int, float, str]:
        m = _PERCENTILE.search(s.name)
        return (0, float("0." + m.group(1)), s.name) if m else (1, 0.0, s.name)

    rows = tuple((s.name, fmt_value(s.value, s.unit) if s.known else f"unknown: {s.reason}", s.source)
                 for s in sorted(picked, key=order))
    if not any(s.known for s in picked):  # one reason, not one row per percentile repeating it
        reasons = sorted({s.reason for s in picked if s.reason}) or [next(
            (n.reason for n in a.not_judged if "latency" in n.what.lower()), "no stage spans in this capture")]
        return TableVM("latency and throughput", (), (), "not captured: " + "; ".join(reasons))
    return TableVM("latency and throughput", ("signal", "value", "source"), rows)


def collectors_table(info: ManifestInfo) -> TableVM:
    rows = tuple((c.name, c.state, c.reason or "-", ", ".join(f"{k} {v}" for k, v in c.counts.items()) or "-")
                 for c in info.collectors)
    return TableVM("collectors", ("collector", "state", "reason", "counts"), rows,
                   "no collector recorded in the manifest")


def quality_table(data_quality: DataQuality) -> TableVM:
    """The warnings first (one row each, diagnose/verdict/data_quality.py), then every figure."""
    warned = tuple(("warning", w.text) for w in data_quality.warnings if w.text)
    rows = warned + tuple((label, fmt_cell(v)) for label, v in data_quality.figures())
    return TableVM("data quality", ("figure", "value"), rows, "no data-quality figures")


def not_judged_table(items: Iterable[NotJudged]) -> TableVM:
    return TableVM("could not judge", ("what", "why"), tuple((n.what, n.reason) for n in items),
                   "everything the rules ask about was measured")


def signals_table(signals: dict[str, Signal]) -> TableVM:
    rows = tuple((s.name, fmt_value(s.value, s.unit) if s.known else f"unknown: {s.reason}", s.source)
                 for s in sorted(signals.values(), key=lambda s: s.name))
    return TableVM("signals", ("signal", "value", "source"), rows, "no signals")


def title_line(info: ManifestInfo, bundle_name: str) -> str:
    t = info.target
    cmd = printable(" ".join(t.cmdline) or t.name or "?")
    return f"{bundle_name} · pid {t.pid or '?'} · {cmd}"


def capture_line(info: ManifestInfo, data_quality: DataQuality) -> str:
    dur = data_quality.capture_s
    partial = " · PARTIAL capture" if info.partial else ""
    host = info.target.host
    return ("captured" + (f" {utc_datetime(info.started_ns)}" if info.started_ns else "")
            + (f" for {dur:g} s" if dur is not None else "") + (f" on {host}" if host else "")
            + f" · ended by: {info.end_reason or '?'}{partial}")


def results_view(a: Analysis, info: ManifestInfo, bundle_name: str) -> ResultsVM:
    """``info``: the bundle's manifest as the host reads it (Bundle.info)."""
    window = capture_window(info)
    groups = bar_groups(a.signals)
    return ResultsVM(
        title=title_line(info, bundle_name),
        capture=capture_line(info, a.data_quality),
        verdict=verdict_vm(a.verdict),
        account=account_table(a),
        findings=sorted_findings(a.findings, window),
        stacks=stack_tree(a.top_stacks),
        stacks_note=("top stacks by share of sampled non-idle thread-time (py-spy)" if a.top_stacks
                     else "no stacks: " + _collector_note(info, "pyspy")),
        gaps=gaps_view(a),
        bar_groups=groups,
        breakdown_note="" if groups else "no breakdown signals in this capture",
        latency=latency_table(a),
        collectors=collectors_table(info),
        quality=quality_table(a.data_quality),
        not_judged=not_judged_table(a.not_judged),
        signals=signals_table(a.signals),
        details=tuple(table_from_rows(humanize(k), v) for k, v in a.details.to_json().items()),
    )


def account_table(a: Analysis) -> TableVM:
    """Where the time went: the limiting account's terms of at least 5% (render/account.py)."""
    from diagnose.render.account import account_rows

    rows = account_rows(a, limiting_only=True)
    title = f"Where the time went ({a.accounts[0].title})" if a.accounts else "Where the time went"
    return TableVM(title, ("share", "quadrant", "layer", "term"),
                   tuple((f"{r.share_pct:.0f}%", r.quadrant, r.layer, r.term) for r in rows),
                   "no source in this capture accounts for time")


def _collector_note(info: ManifestInfo, name: str) -> str:
    c = info.collector(name)
    if c is None:
        return f"collector {name} did not run"
    return f"{name} {c.state}" + (f": {c.reason}" if c.reason else "")


__all__ = ["account_table", "results_view", "verdict_vm", "stack_tree", "bar_groups", "latency_table",
           "table_from_rows", "capture_window", "Quadrant"]

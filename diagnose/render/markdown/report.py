"""report.md: a ticket-sized Markdown report (``md``), and the full one (``md-full``).

The first line is the verdict and the target, usable as a ticket title. Then the headline, where
the time went, key metrics, findings by severity with their evidence and ordered remedies, the top
stacks, what could not be judged, the environment and the command that reproduces the capture.
The default stays under ``MAX_CHARS`` (findings beyond it are named, not shown); ``md-full`` adds
the timeline, GPU, thread, signal and collector tables. Everything from the target goes through
``gfm`` so it renders as written.
"""
from __future__ import annotations

import os
import shlex
from typing import Any, ClassVar

from diagnose.bundle.records.manifest import ManifestInfo
from diagnose.model import STOPPED_READING, Analysis, Report, Severity
from diagnose.render.base import Renderer
from diagnose.render.gain import gain_words, other_gains
from diagnose.render.markdown.gfm import code, fenced, text
from diagnose.render.markdown.gfm import table as _table
from diagnose.render.units import bound_words, fmt_value, pid_text, utc_datetime
from diagnose.results.quality import DataQuality

MAX_FRAMES = 8
MAX_CHARS = 12_000  # the default report fits a ticket field (Jira: 32,767) several times over
TOP_STACKS = 3
TITLE_CMD_CHARS = 80
MAX_QUALITY_NOTES = 8  # data-quality sentences in the head (findings.json has them all)
SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


def reproduce_command(info: ManifestInfo) -> str:
    argv = list(info.command)
    if not argv:
        return "diagnose attach <pid>"
    argv[0] = "diagnose" if os.path.basename(argv[0]) in ("diagnose", "__main__.py", "-m") else argv[0]
    return shlex.join(argv)


def _known(value: str | None) -> str:
    return "?" if value is None else value


def _verdict_words(a: Analysis) -> str:
    v = a.verdict
    if v.quadrant.value == "no_load":
        return "No load"
    if v.quadrant.value == "unknown":
        veto = next((f for f in a.findings if f.blocks_verdict), None)
        if veto is None and v.headline.startswith(f"No verdict: {STOPPED_READING}"):
            return f"No verdict, {STOPPED_READING}"  # read from the account, not the rule
        return f"No verdict, {veto.title[:1].lower() + veto.title[1:]}" if veto else "No verdict"
    mixed = f" with {v.mixed_with.value}" if v.mixed_with else ""
    return f"{bound_words(v.quadrant.value)}{mixed}" + (f", act on the {v.layer.value} layer" if v.layer else "")


class MarkdownRenderer(Renderer):
    format = "md"
    extension = ".md"
    title = "Markdown"
    description = "report.md: the ticket-sized Markdown report (at most 12,000 characters)"
    tui_key: ClassVar[str | None] = "e"
    full = False

    def render(self, report: Report) -> str:
        a, m = report.analysis, report.bundle.info
        head = self._head(a, m) + self._account(a) + self._ranks(a) + self._metrics(a) + self._cost(report)
        tail = self._stacks(a) + self._not_judged(a) + self._environment(report) + self._reproduce(m)
        if self.full:
            tail = (self._stacks(a) + self._timeline(a) + self._gpus(a) + self._threads(a) + self._signals(a)
                    + self._not_judged(a) + self._collectors(a, m) + self._environment(report) + self._reproduce(m))
        budget = None if self.full else MAX_CHARS - _size(head) - _size(tail) - 200
        return "\n".join(head + self._findings(a, budget) + tail).rstrip() + "\n"

    def _head(self, a: Analysis, m: ManifestInfo) -> list[str]:
        t = m.target
        v = a.verdict
        cmd = " ".join(t.cmdline) or _known(t.name)
        short = cmd if len(cmd) <= TITLE_CMD_CHARS else cmd[:TITLE_CMD_CHARS - 1] + "…"
        imported = m.end_reason == "imported"
        who = "imported files" if imported else f"pid {pid_text(t)}"
        span = f"{utc_datetime(m.started_ns)} → {utc_datetime(m.ended_ns)}"
        partial = f" (**partial capture**{_partial_parts(m)})" if m.partial else ""
        when = (f"Imported; the files' events span {span}." if imported else
                f"Captured {span} on {text(_known(t.host))} as {text(_known(t.user))}; ended by: "
                f"{text(_known(m.end_reason))}{partial}.")
        out = [f"# {_verdict_words(a)}: {who} ({text(short)})", "", f"> {text(v.headline)}", ""]
        if v.remedy:
            out += [f"**First remedy:** {text(v.remedy)}.", ""]
            gain = gain_words(v.gains[0]) if v.gains and v.gains[0].remedy == v.remedy else None
            if gain:
                out += [f"**Predicted gain** of the first remedy: {text(gain)}. Check it once applied: "
                        "`diagnose compare THIS_BUNDLE NEW_BUNDLE --change \"what changed\"`.", ""]
            others = other_gains(v.gains, v.remedy)
            if others:
                out += [f"**Other remedies' predicted gains**: {text(others)}.", ""]
        if v.dedicated is not None:
            own = v.dedicated
            out += [f"**On dedicated cores** (the account without its waits for a core): {own.quadrant.value}"
                    + (f", act on the {own.layer.value} layer" if own.layer else "")
                    + (f"; first remedy: {text(own.remedy)}" if own.remedy else "") + ".", ""]
        if v.quadrant.value not in ("unknown", "no_load"):
            out += [f"**Confidence {v.confidence:.2f}**: {text(v.confidence_reason)}.", ""]
        elif v.confidence_reason:
            out += [f"Why: {text(v.confidence_reason)}.", ""]
        dq = a.data_quality
        overrides = dq.analysis.threshold_overrides
        if overrides:
            out += ["**Threshold overrides** (`--thresholds`): " + ", ".join(
                f"{code(k)} = {v:g}" for k, v in overrides.items()) + ".", ""]
        if dq.torch is not None and dq.torch.traces_apart:
            out += [f"**Warning:** {text(dq.torch.traces_apart)}.", ""]
        notes = [*_quality_notes(dq), *(w.text for w in dq.warnings if w.text)]
        out += [line for n in notes for line in (f"**Data quality:** {text(n.rstrip('.'))}.", "")]
        return out + [when, "", f"Target command: {code(cmd)}", ""]

    def _cost(self, report: Report) -> list[str]:
        from diagnose.render.markdown.environment import cost_line

        return [cost_line(report), ""]

    def _account(self, a: Analysis) -> list[str]:
        from diagnose.render.account import MIN_SHARE, account_rows_of

        head = ["## Where the time went", ""]
        if not a.accounts:
            return head + ["No source in this capture accounts for time.", ""]
        out = head + [f"Terms of at least {MIN_SHARE:.0%} of their account; the first account is the "
                      "limiting resource's and the verdict reads it.", ""]
        for acc in a.accounts:
            out += [f"**{text(acc.title)}**: {acc.total_s:.2f} {acc.unit} ({text(acc.source)})", ""]
            out += _table(["term", "share", "quadrant", "layer", "evidence"],
                          [[r.term, f"{r.share_pct:.0f}%", r.quadrant, r.layer, r.evidence]
                           for r in account_rows_of(acc, MIN_SHARE)])
        scores = " · ".join(f"{q.value} {s:.2f}" for q, s in a.verdict.scores.items())
        return out + [f"Quadrant scores (shares of the limiting account): {scores}.", ""]

    def _ranks(self, a: Analysis) -> list[str]:
        from diagnose.render.ranks import ranks_section

        return ranks_section(a.details.ranks)

    def _metrics(self, a: Analysis) -> list[str]:
        from diagnose.render.markdown.metrics import key_metrics
        from diagnose.render.markdown.serving import serving_notes

        rows = key_metrics(a)
        notes = [line for n in serving_notes(a.details) for line in (text(n), "")]
        return ["## Key metrics", ""] + (_table(["metric", "value", "source"], rows) if rows
                                         else ["No metric was measured (see what could not be judged).", ""]) + notes

    def _findings(self, a: Analysis, budget: int | None) -> list[str]:
        out = ["## Findings", ""]
        if not a.findings:
            return out + ["No rule fired.", ""]
        # severity, then confidence: a confident critical finding is never cut behind a weak one
        # (quadrant-less findings, e.g. engine.*, only break ties)
        ordered = sorted(a.findings, key=lambda f: (SEVERITY_ORDER[f.severity], -f.confidence, f.quadrant is None))
        left = []
        for i, f in enumerate(ordered):
            block = _finding_block(f)
            if budget is not None and _size(out + block) > budget and i > 0:
                left = ordered[i:]
                break
            out += block
        if left:
            out += [f"{len(left)} more finding(s) left out to keep this report ticket-sized: "
                    + ", ".join(text(f.title) for f in left) + ". See `diagnose report BUNDLE -f md-full` "
                    "or findings.json.", ""]
        return out

    def _timeline(self, a: Analysis) -> list[str]:
        from diagnose.render.markdown.timeline import latency_section, timeline_section

        return latency_section(a.details) + timeline_section(a.details)

    def _gpus(self, a: Analysis) -> list[str]:
        from diagnose.render.markdown.gpu import gpu_section

        return gpu_section(a.details)

    def _stacks(self, a: Analysis) -> list[str]:
        out = ["## Top stacks (py-spy, share of non-idle thread-time)", ""]
        if not a.top_stacks:
            return out + ["No stacks (see collector status).", ""]
        for s in a.top_stacks[:TOP_STACKS if not self.full else 5]:
            frames = s.frames[-MAX_FRAMES:]
            more = len(s.frames) - len(frames)
            out += [f"**{s.share_pct:.1f}%** · {text(s.category)} · thread {code(_cut(s.thread))}", ""]
            out += fenced(([f"... {more} outer frames"] if more else []) + [_cut(f) for f in frames]) + [""]
        funcs = a.details.top_functions
        if funcs and self.full:
            out += ["### Hot functions", ""]
            out += _table(["function", "self %", "total %"],
                          [[f.function, f"{f.self_pct:.1f}", f"{f.total_pct:.1f}"] for f in funcs])
        return out

    def _threads(self, a: Analysis) -> list[str]:
        if not a.threads:
            return []
        out = ["## Threads", ""]
        return out + _table(["tid", "name", "CPU % of a core", "dominant category", "mostly waits in"], [
            [t.tid, t.name, fmt_value(t.cpu_pct, "%"), t.dominant_category or "-", t.wait_state or "-"]
            for t in a.threads[:15]])

    def _signals(self, a: Analysis) -> list[str]:
        known = [[s.name, fmt_value(s.value, s.unit), s.source]
                 for s in sorted(a.signals.values(), key=lambda s: s.name) if s.known]
        return ["## Signals", "", "Unknown signals and their reasons are in findings.json.", ""] + _table(
            ["signal", "value", "source"], known)

    def _not_judged(self, a: Analysis) -> list[str]:
        if not a.not_judged:
            return []
        seen: set[str] = set()
        lines = []
        for n in a.not_judged:  # one line per reason: several rules missing one source say it once
            if n.reason in seen:
                continue
            seen.add(n.reason)
            lines.append(f"- **{text(n.what)}**: {text(n.reason)}")
        return ["## Could not judge", ""] + lines + [""]

    def _collectors(self, a: Analysis, m: ManifestInfo) -> list[str]:
        out = ["## Collectors and data quality", ""]
        out += _table(["collector", "state", "reason", "counts"], [
            [c.name, c.state, c.reason or "-", ", ".join(f"{k}={v}" for k, v in c.counts.items()) or "-"]
            for c in m.collectors])
        # the warnings are in the head
        return out + [f"- {label}: {text(_plain(v))}" for label, v in a.data_quality.figures()] + [""]

    def _environment(self, report: Report) -> list[str]:
        from diagnose.render.markdown.environment import environment_bits

        flagged = {n for w in report.analysis.data_quality.warnings for n in w.collectors}
        collectors = ", ".join(f"{c.name} {c.state}" + (" (see data quality)" if c.name in flagged else "")
                               for c in report.bundle.info.collectors)
        return ["## Environment", "", "; ".join(environment_bits(report)) + ".", "",
                f"Collectors: {text(collectors)}.", ""]

    def _reproduce(self, m: ManifestInfo) -> list[str]:
        return ["## Reproduce", "", *fenced([reproduce_command(m)]), ""]


class FullMarkdownRenderer(MarkdownRenderer):
    format = "md-full"
    title = "Markdown (full)"
    description = "the full Markdown report: also the timeline, GPU, thread, signal and collector tables"
    tui_key = None
    full = True


def _finding_block(f: Any) -> list[str]:
    quad = f.quadrant.value if f.quadrant else "secondary"
    out = [f"### {text(f.title)} ({quad} · {f.layer.value} layer · {f.severity.value} · "
           f"confidence {f.confidence:.2f})", "", text(f.summary), ""]
    out += _table(["signal", "value", "threshold", "source"], [
        [e.signal, fmt_value(e.value, e.unit), f"{e.op} {fmt_value(e.threshold, e.unit)}", e.source]
        for e in f.evidence])
    if f.suggestions:
        out += [f"What to try ({f.layer.value} layer first):", ""]
        out += [f"{i}. {text(s)}" for i, s in enumerate(f.suggestions, 1)] + [""]
    return out


MAX_NAME_CHARS = 300  # a frame or thread name the target made longer still fits the report's budget


def _cut(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS - 1] + "…"


def _size(lines: list[str]) -> int:
    return sum(len(ln) + 1 for ln in lines)


def _quality_notes(dq: DataQuality) -> list[str]:
    """What the analysis left out or repaired, one sentence each: malformed trace events dropped or
    repaired, server-lifetime root spans kept out of the request statistics, bundle members not
    read (a FIFO, device or symlink), traces left out of the job of several ranks."""
    damage = dq.torch.trace_damage if dq.torch else ()
    ranks = dq.torch.ranks_not_compared if dq.torch else None
    excluded = dq.spans.requests_excluded if dq.spans else None
    unread = dq.streams.unreadable_members
    skipped = [f"bundle member {name} not read: {why}" for name, why in list(unread.items())[:MAX_QUALITY_NOTES]]
    return (list(damage[:MAX_QUALITY_NOTES]) + ([excluded] if excluded else []) + skipped
            + ([ranks] if ranks else []))


def _plain(v: Any) -> str:
    """A data-quality value as text: dicts as ``key = value`` pairs, not Python reprs."""
    if isinstance(v, dict):
        return ", ".join(f"{k} = {x:g}" if isinstance(x, float) else f"{k} = {x}" for k, x in v.items())
    return str(v)



def _partial_parts(m: ManifestInfo) -> str:
    """Which collectors recorded only part of what they were asked for (the Collectors section says why)."""
    parts = [c.name for c in m.collectors if c.state == "partial"]
    return f": {', '.join(parts)} recorded part of what was asked, see Collectors and data quality" if parts else ""


__all__ = ["FullMarkdownRenderer", "MarkdownRenderer", "reproduce_command"]

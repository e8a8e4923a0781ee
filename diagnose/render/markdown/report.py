"""report.md: a Markdown report that can be pasted into a ticket."""
from __future__ import annotations

import os
import re
import shlex
from typing import Any

from diagnose.model import Analysis, Report
from diagnose.render.base import Renderer
from diagnose.render.units import fmt_value, utc_datetime

MAX_FRAMES = 8


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _cell(text: Any) -> str:
    """One line of literal text: control characters (CR, ESC...) out, HTML and table pipes escaped.
    (Full GFM escaping of target-supplied names is issue 13's.)"""
    return _CONTROL.sub(" ", str(text)).replace("<", "&lt;").replace("|", "\\|")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def reproduce_command(manifest: dict[str, Any]) -> str:
    argv = list(manifest.get("command") or [])
    if not argv:
        return "diagnose attach <pid>"
    argv[0] = "diagnose" if os.path.basename(argv[0]) in ("diagnose", "__main__.py", "-m") else argv[0]
    return shlex.join(argv)


class MarkdownRenderer(Renderer):
    format = "md"
    extension = ".md"
    title = "Markdown"
    description = "report.md: the Markdown report to paste into a ticket"
    tui_key = "e"

    def render(self, report: Report) -> str:
        analysis, manifest = report.analysis, report.manifest
        lines: list[str] = []
        for section in (self._head, self._account, self._findings, self._timeline, self._gpus, self._stacks,
                        self._threads, self._signals, self._not_judged, self._collectors):
            lines += section(analysis, manifest)
        return "\n".join(lines).rstrip() + "\n"

    def _head(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        t = m.get("target") or {}
        v = a.verdict
        cmd = " ".join(t.get("cmdline") or []) or t.get("name", "?")
        imported = m.get("end_reason") == "imported"
        title = f"imported files ({_cell(cmd)[:120]})" if imported else f"pid {t.get('pid', '?')} ({_cell(cmd)[:120]})"
        span = f"{utc_datetime(m.get('started_ns'))} → {utc_datetime(m.get('ended_ns'))}"
        when = (f"Imported; the files' events span {span}."
                if imported else
                f"Captured {span} on "
                f"{t.get('host', '?')} as {t.get('user', '?')}; ended by: {m.get('end_reason', '?')}"
                + (" (**partial capture**)" if m.get("partial") else "") + ".")
        out = [
            f"# diagnose report: {title}",
            "",
            f"**Verdict: {v.quadrant.value}-bound**"
            + (f" · act on the **{v.layer.value}** layer first" if v.layer else "")
            + (f" · with **{v.mixed_with.value}**" if v.mixed_with else "")
            + f" · confidence {v.confidence:.2f}" if v.quadrant.value not in ("unknown", "no_load")
            else ("**Verdict: no load** (nothing limits this service now)" if v.quadrant.value == "no_load"
                  else "**Verdict: unknown** (nothing in this capture accounts for time)"),
            "",
            f"> {_cell(v.headline)}",
            "",
            f"Confidence {v.confidence:.2f}: {v.confidence_reason}." if v.confidence_reason else "",
            "",
            when,
            "",
        ]
        return out

    def _account(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        from diagnose.render.account import MIN_SHARE, account_rows_of

        head = ["## Where the time went", ""]
        if not a.accounts:
            return head + ["No source in this capture accounts for time.", ""]
        out = head + [f"Terms of at least {MIN_SHARE:.0%} of their account; the first account is the "
                      "limiting resource's and the verdict reads it.", ""]
        for acc in a.accounts:
            out += [f"**{_cell(acc.title)}**: {acc.total_s:.2f} {acc.unit} ({_cell(acc.source)})", ""]
            out += _table(["term", "share", "quadrant", "layer", "evidence"],
                          [[r.term, f"{r.share_pct:.0f}%", r.quadrant, r.layer, r.evidence]
                           for r in account_rows_of(acc, MIN_SHARE)])
        scores = " · ".join(f"{q.value} {s:.2f}" for q, s in a.verdict.scores.items())
        return out + [f"Quadrant scores (shares of the limiting account): {scores}.", ""]

    def _findings(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        out = ["## Findings", ""]
        if not a.findings:
            return out + ["No rule fired.", ""]
        for f in a.findings:
            quad = f.quadrant.value if f.quadrant else "secondary"
            out += [f"### {f.title} ({quad} · {f.layer.value} layer · {f.severity.value} · "
                    f"confidence {f.confidence:.2f})", "", f.summary, ""]
            out += _table(["signal", "value", "threshold", "source"], [
                [e.signal, fmt_value(e.value, e.unit), f"{e.op} {fmt_value(e.threshold, e.unit)}", e.source]
                for e in f.evidence])
            out += [f"{i}. {s}" for i, s in enumerate(f.suggestions, 1)] + [""]
        return out

    def _timeline(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        from diagnose.render.markdown.timeline import latency_section, timeline_section

        return latency_section(a.details) + timeline_section(a.details)

    def _gpus(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        from diagnose.render.markdown.gpu import gpu_section

        return gpu_section(a.details)

    def _stacks(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        out = ["## Top stacks (py-spy, share of non-idle thread-time)", ""]
        if not a.top_stacks:
            return out + ["No stacks (see collector status).", ""]
        for s in a.top_stacks[:5]:
            frames = s.frames[-MAX_FRAMES:]
            more = len(s.frames) - len(frames)
            out += [f"**{s.share_pct:.1f}%** · {s.category} · thread `{_cell(s.thread)}`", "", "```"]
            out += ([f"... {more} outer frames"] if more else []) + list(frames) + ["```", ""]
        funcs = a.details.get("top_functions") or []
        if funcs:
            out += ["### Hot functions", ""]
            out += _table(["function", "self %", "total %"],
                          [[f["function"], f"{f['self_pct']:.1f}", f"{f['total_pct']:.1f}"] for f in funcs])
        return out

    def _threads(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        if not a.threads:
            return []
        out = ["## Threads", ""]
        return out + _table(["tid", "name", "CPU % of a core", "dominant category", "mostly waits in"], [
            [t.tid, t.name, fmt_value(t.cpu_pct, "%"), t.dominant_category or "-", t.wait_state or "-"]
            for t in a.threads[:15]])

    def _signals(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        out = ["## Signals", ""]
        rows = [[s.name, fmt_value(s.value, s.unit) if s.known else f"unknown: {s.reason}", s.source]
                for s in sorted(a.signals.values(), key=lambda s: s.name)]
        return out + _table(["signal", "value", "source"], rows)

    def _not_judged(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        if not a.not_judged:
            return []
        return ["## Could not judge", ""] + [f"- **{n.what}**: {n.reason}" for n in a.not_judged] + [""]

    def _collectors(self, a: Analysis, m: dict[str, Any]) -> list[str]:
        out = ["## Collectors and data quality", ""]
        out += _table(["collector", "state", "reason", "counts"], [
            [c.get("name"), c.get("state"), c.get("reason") or "-",
             ", ".join(f"{k}={v}" for k, v in (c.get("counts") or {}).items()) or "-"]
            for c in m.get("collectors", [])])
        dq = {k: v for k, v in a.data_quality.items() if v not in (None, {}, [])}
        out += [f"- {k.replace('_', ' ')}: {_cell(_plain(v))}" for k, v in dq.items()] + [""]
        out += ["## Reproduce", "", "```", reproduce_command(m), "```", ""]
        return out


def _plain(v: Any) -> str:
    """A data-quality value as text: dicts as ``key = value`` pairs, not Python reprs."""
    if isinstance(v, dict):
        return ", ".join(f"`{k}` = {x:g}" if isinstance(x, float) else f"`{k}` = {x}" for k, x in v.items())
    return str(v)


__all__ = ["MarkdownRenderer", "reproduce_command"]

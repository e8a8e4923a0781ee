"""The job analysis of several ranks (``details.ranks``, diagnose/ranks/model.py JobAnalysis.to_json)
as text lines (``diagnose analyze``) and as a Markdown section (report.md). Pure."""
from __future__ import annotations

from typing import Any

from diagnose.render.markdown.gfm import table as md_table
from diagnose.render.markdown.gfm import text
from diagnose.results.ranks import JobView, job_view

MAX_RANK_ROWS = 64  # per-rank rows in the terminal; findings.json has every rank
MD_RANK_ROWS = 16  # per-rank rows in the ticket-sized report.md: the latest ranks first


def _pct(v: Any) -> str:
    return f"{v:.0f}%" if isinstance(v, (int, float)) else "-"


def _ms(v: Any) -> str:
    return f"{v / 1e6 + 0.0:.2f}".replace("-0.00", "0.00") if isinstance(v, (int, float)) else "-"


def rank_rows(job: JobView, limit: int = MAX_RANK_ROWS) -> list[list[str]]:
    """rank, verdict, compute %, communication %, memcpy %, idle %, GPU window ms, collectives
    (stragglers first when rows are left out)."""
    late = {s.rank for s in job.stragglers if s.straggler}
    ranks = job.ranks if len(job.ranks) <= limit else sorted(job.ranks, key=lambda r: r.rank not in late)
    return [[str(r.rank), r.verdict + (f" {_pct(r.verdict_pct)}" if r.verdict_pct is not None else ""),
             _pct(r.compute_pct), _pct(r.communication_pct), _pct(r.memcpy_pct),
             _pct(r.idle_pct), _ms(r.span_ns), str(r.collectives)]
            for r in ranks[:limit]]


RANK_HEAD = ["rank", "verdict", "compute", "comm", "memcpy", "idle", "GPU window ms", "collectives"]
STRAGGLER_HEAD = ["rank", "straggler", "collective lag ms", "last to arrive", "step lag ms", "waited ms"]


def straggler_rows(job: JobView, limit: int = MAX_RANK_ROWS) -> list[list[str]]:
    """Ranks by lag, latest first: lag at collectives and steps (ms after the median rank), how
    often last to arrive, time spent waiting for the last rank."""
    rows = sorted(job.stragglers, key=lambda s: -s.lag_ns)
    return [[str(s.rank), "yes" if s.straggler else "", _ms(s.collective_lag_ns),
             f"{s.last_arrivals}/{s.collectives_matched}", _ms(s.step_lag_ns), _ms(s.wait_ns)]
            for s in rows[:limit]]


def _comm_sentence(job: JobView) -> str | None:
    c = job.collectives
    if not c:
        return None
    return (f"{c.collectives} collectives matched across ranks (by {c.matched_by}; {c.unmatched} on one rank "
            f"only): {_ms(c.comm_ns)} ms of collective time = {_ms(c.true_comm_ns)} ms true communication + "
            f"{_ms(c.skew_ns)} ms synchronisation skew ({_pct(c.skew_pct)})")


def _columns(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *rows]]


def rank_lines(raw: dict[str, Any] | None) -> list[str]:
    """Text for the terminal: the job verdict, the per-rank table, the straggler table; [] without."""
    if not raw:
        return []
    job = job_view(raw)
    v = job.verdict
    out = [f"job of {job.scope}: {v.bound}: {v.headline}"]
    comm = _comm_sentence(job)
    if comm:
        out.append("  " + comm)
    out += ["per rank (share of each rank's GPU window; comm includes waiting at collectives for late ranks):",
            *_columns(RANK_HEAD, rank_rows(job))]
    if job.stragglers:
        out += ["stragglers (lag: start after the median rank's):", *_columns(STRAGGLER_HEAD, straggler_rows(job))]
    out += [f"  note: {n}" for n in job.notes]
    return out


def ranks_section(raw: dict[str, Any] | None) -> list[str]:
    """The report.md section "Ranks"; [] without a job analysis."""
    if not raw:
        return []
    job = job_view(raw)
    v = job.verdict
    out = ["## Ranks", "", f"**Job of {job.scope}: {text(v.bound)}**: {text(v.headline)}.", ""]
    comm = _comm_sentence(job)
    if comm:
        out += [text(comm) + ".", ""]
    more = max(0, job.world - MD_RANK_ROWS)
    out += md_table(RANK_HEAD, rank_rows(job, MD_RANK_ROWS))
    if job.stragglers:
        out += ["Stragglers (lag: start after the median rank's, ms), the latest first:", ""]
        out += md_table(STRAGGLER_HEAD, straggler_rows(job, MD_RANK_ROWS))
    if more:
        out += [f"{more} more rank(s) in findings.json (`details.ranks`).", ""]
    out += [f"Note: {text(n)}." for n in job.notes]
    return out + ([""] if job.notes else [])


__all__ = ["rank_lines", "ranks_section"]

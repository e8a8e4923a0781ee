""""Where the time went": the account's rows as every renderer shows them (pure)."""
from __future__ import annotations

from dataclasses import dataclass

from diagnose.model import HOST, STOPPED, Account, Analysis, Quadrant
from diagnose.render.gain import gain_words

MIN_SHARE = 0.05  # terms below 5% of their account are left out of the table (always in JSON)


@dataclass(frozen=True)
class AccountRow:
    account: str  # the account's title
    term: str
    share_pct: float
    quadrant: str  # a Quadrant value ("no_load": waiting for work), "host" (waiting for a core), "stopped"
    layer: str
    evidence: str


def account_rows(a: Analysis, min_share: float = MIN_SHARE, limiting_only: bool = False) -> list[AccountRow]:
    """One row per term of at least ``min_share``, the limiting account first, then "not attributed"."""
    rows: list[AccountRow] = []
    for acc in a.accounts[:1] if limiting_only else a.accounts:
        rows += account_rows_of(acc, min_share)
    return rows


def account_rows_of(acc: Account, min_share: float = MIN_SHARE) -> list[AccountRow]:
    out = [AccountRow(acc.title, t.label, 100.0 * t.share,
                      t.quadrant.value if t.quadrant else _outside(t.kind, t.layer is not None),
                      t.layer.value if t.layer else "-", t.evidence)
           for t in acc.terms if t.share >= min_share]
    if acc.not_attributed >= min_share:
        out.append(AccountRow(acc.title, "not attributed", 100.0 * acc.not_attributed, "-", "-",
                              "; ".join(acc.notes) or "time no term accounts for"))
    return out


def _outside(kind: str, has_layer: bool) -> str:
    """The quadrant column of a term outside the target's quadrants."""
    return STOPPED if kind == STOPPED else HOST if has_layer else Quadrant.NO_LOAD.value


__all__ = ["AccountRow", "MIN_SHARE", "account_lines", "account_rows", "account_rows_of"]


def account_lines(a: Analysis, min_share: float = MIN_SHARE) -> list[str]:
    """The limiting account as plain text lines, for the terminal (``analyze``, ``attach``)."""
    notes = [f"data quality: {w.text}" for w in a.data_quality.warnings if w.text]
    if not a.accounts:
        return ["where the time went: no source in this capture accounts for time", *notes]
    out = []
    for acc in a.accounts[:1] + tuple(x for x in a.accounts[1:] if "analysed apart" in x.title):
        out.append(f"where the time went ({acc.title}, {acc.total_s:.2f} {acc.unit}):")
        for r in account_rows_of(acc, min_share):
            out.append(f"  {r.share_pct:4.0f}%  {r.quadrant:<10} {r.layer:<8} {r.term}")
    if a.verdict.confidence_reason:
        out.append(f"confidence {a.verdict.confidence:.2f}: {a.verdict.confidence_reason}")
    if a.verdict.remedy:
        out.append(f"first remedy: {a.verdict.remedy}")
        gain = gain_words(a.verdict.gains[0]) if a.verdict.gains and a.verdict.gains[0].remedy == a.verdict.remedy \
            else None
        if gain:
            out.append(f"predicted gain: {gain}")
    own = a.verdict.dedicated
    if own is not None:
        out.append(f"on dedicated cores: {own.quadrant.value}/{own.layer.value if own.layer else '-'}: "
                   f"first remedy: {own.remedy or '-'}")
    return out + notes

"""Request-time account from stage spans: each stage's share of the time requests were open.

Stages come from catalogs/stages.py (span names and OpenTelemetry attributes); request time
outside every stage span stays not attributed. Pure: reads the signals and the request table.
"""
from __future__ import annotations

from diagnose.account.kinds import KINDS
from diagnose.catalogs.stages import STAGES
from diagnose.model import Account, AccountTerm, Signal
from diagnose.results.details import Details

SRC = "stage spans (OpenTelemetry), share of request time"


def request_account(signals: dict[str, Signal], details: Details) -> Account | None:
    req = details.requests
    if req is None or not req.requests:
        return None
    mean_ms = (req.latency.mean_ms if req.latency else None) or 0.0
    n = req.requests_estimated if req.requests_estimated is not None else req.requests  # sampled: x N
    total_s = n * mean_ms / 1e3
    shares = {}
    for st in STAGES:
        s = signals.get(f"spans.stage_share_pct[{st}]")
        if s is not None and s.value and s.value > 0:
            shares[st] = s.value / 100.0
    notes = ["time outside every stage span is not attributed"]
    over = sum(shares.values())
    if over > 1.0:  # stage spans overlap (parallel calls, nested stages): a partition cannot exceed 1
        shares = {st: v / over for st, v in shares.items()}
        notes.append(f"stage spans overlap ({over:.0%} of request time in stages): shares scaled to add up to 1")
    terms = []
    for st, share in shares.items():
        k = KINDS[f"stage.{st}"]
        terms.append(AccountTerm(k.kind, k.label, share, total_s * share, k.quadrant, k.layer,
                                 f"{100 * share:.0f}% in `{st}` spans over {req.requests} requests", k.rule_id))
    terms.sort(key=lambda t: -t.share)
    return Account("requests", "request time (stage spans)", "request-s", total_s, tuple(terms),
                   tuple(notes), SRC, int(req.requests))


__all__ = ["request_account"]

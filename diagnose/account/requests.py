"""Request-time account from stage spans: each stage's share of the time requests were open.

Stages come from rules/stage_catalog.py (span names and OpenTelemetry attributes); request time
outside every stage span stays not attributed. Pure: reads the signals and the request table.
"""
from __future__ import annotations

from typing import Any

from diagnose.model import Account, AccountTerm, Signal
from diagnose.rules.stage_catalog import STAGES

from .kinds import KINDS

SRC = "stage spans (OpenTelemetry), share of request time"


def request_account(signals: dict[str, Signal], details: dict[str, Any]) -> Account | None:
    req = details.get("requests") or {}
    if not req.get("requests"):
        return None
    lat = req.get("latency") or {}
    total_s = req["requests"] * (lat.get("mean_ms") or 0.0) / 1e3
    terms = []
    for st in STAGES:
        s = signals.get(f"spans.stage_share_pct[{st}]")
        if s is None or not s.value:
            continue
        k = KINDS[f"stage.{st}"]
        terms.append(AccountTerm(k.kind, k.label, s.value / 100.0, total_s * s.value / 100.0, k.quadrant, k.layer,
                                 f"{s.value:.0f}% in `{st}` spans over {req['requests']} requests",
                                 k.rule_id))
    terms.sort(key=lambda t: -t.share)
    return Account("requests", "request time (stage spans)", "request-s", total_s, tuple(terms),
                   ("time outside every stage span is not attributed",), SRC, int(req["requests"]))


__all__ = ["request_account"]

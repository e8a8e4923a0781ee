"""The time account: signals -> partitions of the captured time (threads, GPU, requests).

``build_accounts`` returns every account the bundle supports, the limiting resource's first:
the GPU where a kernel timeline exists (the resource the service exists to feed) or its counters
show it busy most of the time, else the target's threads, else its requests (stage spans, then the
serving engine's own /metrics), else a CPU-only torch trace.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import msgspec

from diagnose.account.engine import engine_account
from diagnose.account.gpu import gpu_account, gpu_counters_account, torch_cpu_account
from diagnose.account.requests import request_account
from diagnose.account.threads import thread_account
from diagnose.bundle import Bundle
from diagnose.bundle.errors import MALFORMED
from diagnose.model import Account, Signal
from diagnose.signals import Extracted

SOURCES: tuple[tuple[str, Callable[[Bundle, Extracted], Account | None]], ...] = (
    ("gpu", lambda b, ex: gpu_account(ex.signals, ex.details)
     or gpu_counters_account(ex.signals, ex.data_quality.capture_s)),
    # with a kernel timeline too, the counters' account is a second opinion on the GPU's busy time
    ("gpu_counters", lambda b, ex: gpu_counters_account(ex.signals, ex.data_quality.capture_s)
     if gpu_account(ex.signals, ex.details) is not None else None),
    ("threads", lambda b, ex: thread_account(b, ex.signals)),
    ("requests", lambda b, ex: request_account(ex.signals, ex.details)),
    ("engine", lambda b, ex: engine_account(ex.details)),
    ("torch_ops", lambda b, ex: torch_cpu_account(ex.signals, ex.details)),
)


def build_accounts(bundle: Bundle, ex: Extracted) -> tuple[Account, ...]:
    """Every account the bundle supports, in SOURCES order (the limiting-resource preference). A
    malformed stream costs its account (named in ``data_quality.streams.account_errors``), not the rest."""
    found = []
    errors: dict[str, str] = {}
    for name, source in SOURCES:
        try:
            acc = source(bundle, ex)
        except MALFORMED as exc:
            errors[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
            continue
        if acc is not None and acc.terms:
            found.append(acc)
    if errors:
        dq = ex.data_quality
        ex.data_quality = msgspec.structs.replace(dq, streams=msgspec.structs.replace(
            dq.streams, account_errors={**dq.streams.account_errors, **errors}))
    return tuple(found) + _apart(ex)


def _apart(ex: Extracted) -> tuple[Account, ...]:
    """Traces that do not belong with the ones the signals read (signals/trace_groups.py): one
    account per group, after the limiting one, never blended into it."""
    out = []
    for g in (ex.details.trace_groups.groups if ex.details.trace_groups else ())[1:]:
        sig = {n: Signal(n, v, "", "trace group") for n, v in g.signals.items()}
        acc = gpu_account(sig, g) or torch_cpu_account(sig, g)
        if acc is not None:
            out.append(replace(acc, title=f"{acc.title}, analysed apart: {', '.join(g.files)}"))
    return tuple(out)


__all__ = ["build_accounts"]

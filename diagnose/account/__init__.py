"""The time account: signals -> partitions of the captured time (threads, GPU, requests).

``build_accounts`` returns every account the bundle supports, the limiting resource's first:
the GPU where a kernel timeline exists (the resource the service exists to feed) or its counters
show it busy most of the time, else the target's threads, else its requests, else a CPU-only torch trace.
"""
from __future__ import annotations

from diagnose.bundle import Bundle
from diagnose.model import Account
from diagnose.signals import Extracted

from .gpu import gpu_account, gpu_counters_account, torch_cpu_account
from .requests import request_account
from .threads import thread_account

def build_accounts(bundle: Bundle, ex: Extracted) -> tuple[Account, ...]:
    found = (gpu_account(ex.signals, ex.details) or gpu_counters_account(ex.signals, ex.data_quality.get("capture_s")),
             thread_account(bundle, ex.signals),
             request_account(ex.signals, ex.details), torch_cpu_account(ex.signals, ex.details))
    return tuple(a for a in found if a is not None and a.terms)


__all__ = ["build_accounts"]

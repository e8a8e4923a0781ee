"""What a capture cost the host: diagnose's own CPU time and peak memory, and its child processes'
(the py-spy windows; the live view's analysis children), from getrusage(2) deltas over the
capture, plus the host facts a report's environment line names.

``CostMeter.finish()`` -> the manifest's ``cost``: ``wall_s`` (s), ``diagnose_cpu_s`` (user +
system, all threads of this process, s), ``children_cpu_s`` (reaped child processes, plus the
capture's parsing child still running: ``parse_ahead_cpu_s``, diagnose/capture/ahead.py; s),
``max_rss_bytes`` (this process' peak resident set, bytes; Linux ru_maxrss is KiB), ``host_cpus``.
The agent's stall of the target (torch window) is not measured here: the report says so.
"""
from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass, field
from typing import Any


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@dataclass
class CostMeter:
    t0: float = field(default_factory=time.monotonic)
    self0: float = field(default_factory=lambda: _cpu(resource.RUSAGE_SELF))
    children0: float = field(default_factory=lambda: _cpu(resource.RUSAGE_CHILDREN))

    def finish(self, parse_ahead_cpu_s: float | None = None) -> dict[str, Any]:
        """``parse_ahead_cpu_s``: the CPU of the parsing child so far (not reaped yet: getrusage does
        not count it), added to ``children_cpu_s`` and stated on its own."""
        extra = parse_ahead_cpu_s or 0.0
        return {
            "wall_s": round(time.monotonic() - self.t0, 3),
            "diagnose_cpu_s": round(_cpu(resource.RUSAGE_SELF) - self.self0, 3),
            "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - self.children0 + extra, 3),
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "host_cpus": os.cpu_count() or 1,
        } | ({"parse_ahead_cpu_s": round(extra, 3)} if parse_ahead_cpu_s is not None else {})


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:  # our own host's, not the target's
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def host_facts() -> dict[str, Any]:
    """The capturing host: OS and kernel, CPU model, logical CPUs, memory (bytes)."""
    facts: dict[str, Any] = {"os": f"{platform.system()} {platform.release()}", "machine": platform.machine(),
                             "cpu": _cpu_model(), "cpus": os.cpu_count()}
    try:
        facts["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {k: v for k, v in facts.items() if v is not None}


__all__ = ["CostMeter", "host_facts"]

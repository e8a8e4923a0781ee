"""What a capture cost the host: diagnose's own CPU time and peak memory, and its child processes'
(the py-spy windows; the live view's analysis children), from getrusage(2) deltas over the
capture, plus the host facts a report's environment line names.

``CostMeter.finish()`` -> the manifest's ``cost``: ``wall_s`` (s), ``diagnose_cpu_s`` (user +
system, all threads of this process, s), ``children_cpu_s`` (child processes, s: those reaped by
the end, as getrusage(RUSAGE_CHILDREN) counts them, which covers every py-spy window, the py-spy
probe and the OTLP decoder, plus the CPU during the capture of the children registered with
``own_child`` that still run then: the live view's analysis child lives as long as the view; plus
the capture's parsing child still running: ``parse_ahead_cpu_s``, diagnose/capture/ahead.py),
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


_own: dict[int, tuple[float, float]] = {}  # pid -> (create time, CPU s when registered)


def _child_cpu(pid: int, created: float) -> float | None:
    """CPU s so far of running child ``pid`` and its reaped children; None when it is gone or
    another process has its pid."""
    import psutil

    try:
        p = psutil.Process(pid)
        if p.create_time() != created or p.status() == psutil.STATUS_ZOMBIE:
            return None  # a zombie's CPU reaches RUSAGE_CHILDREN when it is reaped
        t = p.cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system + t.children_user + t.children_system)


def own_child(pid: int) -> None:
    """Count child ``pid``, which diagnose runs for itself and which may still run when a capture
    ends (not yet in RUSAGE_CHILDREN), in the cost of the captures it runs during."""
    import psutil

    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return
    _own[pid] = (created, _child_cpu(pid, created) or 0.0)


def _running_own() -> dict[int, float]:
    """CPU s so far of the registered children still running (the others are forgotten)."""
    out = {}
    for pid, (created, _) in list(_own.items()):
        cpu = _child_cpu(pid, created)
        if cpu is None:
            _own.pop(pid, None)
        else:
            out[pid] = cpu
    return out


@dataclass
class CostMeter:
    t0: float = field(default_factory=time.monotonic)
    self0: float = field(default_factory=lambda: _cpu(resource.RUSAGE_SELF))
    children0: float = field(default_factory=lambda: _cpu(resource.RUSAGE_CHILDREN))
    running0: dict[int, float] = field(default_factory=_running_own)

    def finish(self, parse_ahead_cpu_s: float | None = None) -> dict[str, Any]:
        """``parse_ahead_cpu_s``: the CPU of the parsing child so far (not reaped yet: getrusage does
        not count it), added to ``children_cpu_s`` and stated on its own."""
        extra = parse_ahead_cpu_s or 0.0
        running = sum(cpu - self.running0.get(pid, _own[pid][1]) for pid, cpu in _running_own().items())
        return {
            "wall_s": round(time.monotonic() - self.t0, 3),
            "diagnose_cpu_s": round(_cpu(resource.RUSAGE_SELF) - self.self0, 3),
            "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - self.children0 + max(0.0, running) + extra, 3),
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


__all__ = ["CostMeter", "host_facts", "own_child"]

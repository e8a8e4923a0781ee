"""The capture's overhead budget: diagnose's CPU (its own threads plus its child processes, the
py-spy windows) held under ``--overhead-budget`` percent of one core by lowering the sampling rates.

py-spy's cost grows with threads x rate, and so does the process collector's (stat and schedstat
per thread per reading). Measured (benchmarks/own_cpu.py, py-spy 0.4.3, non-blocking, at nice 19,
this 2-core VM shared with other work): ~PYSPY_SAMPLE_MS per sampling round plus ~PYSPY_THREAD_MS
per thread per round of py-spy's own CPU (40 threads: ~1.8-2 ms a round, its restart each window
~19 ms; 5 threads of the torch demo at 100 Hz: ~0.45 ms a round); the process collector
~PROC_TICK_MS plus ~PROC_THREAD_MS per thread per reading (40 threads: 1.2 ms, 5 threads: 0.8 ms).
The first rates of both are planned from the target's thread count (the /proc readings first,
since the thread account needs them less often than py-spy's stacks); then every PERIOD_S the
budget reads what was used (the CPU of the collector threads of this process, and of the py-spy
windows as the collector counts it: getrusage of the ended ones, psutil of the running one) and
lowers the py-spy rate (taken at its next window) and the process collector's rate when over, or
raises them back toward what was asked when under RAISE_BELOW of the budget, py-spy's only as far
as its measured cost per Hz keeps the collectors under RAISE_TO of it. The parsing child
(diagnose/capture/ahead.py) is metered with the py-spy windows: its work grows with what py-spy
samples. The capture's one-time CPU outside the collectors (the analysis imported meanwhile so the
verdict comes sooner, the parsing child's imports: FIXED_CAPTURE_CPU_S) is reserved from the budget
over the capture's duration, so the whole of diagnose's CPU, as the manifest's ``cost`` counts it,
stays near the budget (a 40-thread target, 20 s: 11.2% of a core before the reservation). Every
change is recorded with its reason, for the manifest (``budget``) and the report's cost line.
"""
from __future__ import annotations

import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PCT_OF_CORE = 10.0
PYSPY_SAMPLE_MS = 0.3
PYSPY_THREAD_MS = 0.045
PROC_TICK_MS = 0.7
PROC_THREAD_MS = 0.02
OWN_FIXED_CORES = 0.01  # diagnose's other capture-time work (the capture loop, the budget)
FIXED_CAPTURE_CPU_S = 0.5  # one-time, per capture: analysis imports ~0.2 s + the parsing child's ~0.3 s
MAX_RESERVE_SHARE = 0.5  # a short capture reserves at most this share of the budget for them
PROC_SHARE = 0.3  # the /proc readings' planned share of the budget at most, when the threads are many
MIN_PYSPY_HZ = 5
MIN_PROCESS_HZ = 2.0
PERIOD_S = 2.0
RAISE_BELOW = 0.6  # raise the rates again when under this share of the budget
RAISE_TO = 0.8  # ... py-spy's no further than its cost per Hz predicts keeps them under this share


def pyspy_cores(rate_hz: float, threads: int) -> float:
    """py-spy's predicted CPU, in cores, at ``rate_hz`` on a target of ``threads`` threads."""
    return rate_hz * (PYSPY_SAMPLE_MS + PYSPY_THREAD_MS * max(1, threads)) / 1e3


def process_cores(rate_hz: float, threads: int) -> float:
    """The process collector's predicted CPU, in cores, at ``rate_hz`` on ``threads`` threads."""
    return rate_hz * (PROC_TICK_MS + PROC_THREAD_MS * max(1, threads)) / 1e3


def planned_process_rate(asked_hz: float, threads: int, budget_cores: float) -> float:
    """The process collector's first rate (<= asked): at most PROC_SHARE of the budget."""
    fits = PROC_SHARE * budget_cores / process_cores(1.0, threads)
    return max(MIN_PROCESS_HZ, min(asked_hz, int(fits * 10) / 10))


def reserve_cores(budget_cores: float, duration_s: float | None) -> float:
    """The budget kept for the capture's one-time CPU (FIXED_CAPTURE_CPU_S over ``duration_s``),
    in cores; 0 when the duration is unknown."""
    if not duration_s or duration_s <= 0:
        return 0.0
    return min(MAX_RESERVE_SHARE * budget_cores, FIXED_CAPTURE_CPU_S / duration_s)


def planned_rate(asked_hz: int, threads: int, budget_cores: float, process_hz: float = 10.0,
                 reserved_cores: float = 0.0) -> int:
    """The highest py-spy rate (<= asked) whose predicted cost fits the budget beside diagnose's
    own at ``process_hz`` and ``reserved_cores`` (reserve_cores)."""
    room = max(0.0, budget_cores - OWN_FIXED_CORES - reserved_cores - process_cores(process_hz, threads))
    fits = int(room / pyspy_cores(1.0, threads))
    return max(MIN_PYSPY_HZ, min(asked_hz, fits))


def _collectors_s() -> float:
    """CPU s so far of this process' collector threads (named ``diagnose-*``): the live view's
    rendering runs in this process too and is the user's choice, not the capture's cost."""
    import psutil

    ours = {t.native_id for t in threading.enumerate() if t.name.startswith("diagnose-") and t.native_id}
    try:
        return float(sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in ours))
    except psutil.Error:
        me = resource.getrusage(resource.RUSAGE_SELF)
        return me.ru_utime + me.ru_stime


@dataclass
class Rates:
    """The rates the collectors read: py-spy's for its next window, the process collector's live."""

    pyspy_hz: int
    process_hz: float


@dataclass
class OverheadBudget:
    pct_of_core: float
    asked: Rates
    rates: Rates
    changes: list[dict[str, Any]] = field(default_factory=list)
    used_cores: list[float] = field(default_factory=list)
    reserved_cores: float = 0.0  # reserve_cores(): counted as used at every review
    _last: tuple[float, float, float] | None = None  # monotonic, own CPU s, children CPU s

    @property
    def cores(self) -> float:
        return self.pct_of_core / 100.0

    @classmethod
    def plan(cls, pct_of_core: float, asked_pyspy_hz: int, asked_process_hz: float, threads: int,
             duration_s: float | None = None) -> OverheadBudget:
        b = cls(pct_of_core, Rates(asked_pyspy_hz, asked_process_hz), Rates(asked_pyspy_hz, asked_process_hz))
        b.reserved_cores = reserve_cores(b.cores, duration_s)
        proc_hz = planned_process_rate(asked_process_hz, threads, b.cores)
        if proc_hz < asked_process_hz:
            b._change(0.0, process_hz=proc_hz, why=f"{threads} threads x {asked_process_hz:g} Hz of /proc readings "
                      f"would cost ~{100 * process_cores(asked_process_hz, threads):.0f}% of a core")
        hz = planned_rate(asked_pyspy_hz, threads, b.cores, proc_hz, b.reserved_cores)
        if hz < asked_pyspy_hz:
            b._change(0.0, pyspy_hz=hz, why=f"{threads} threads x {asked_pyspy_hz} Hz would cost py-spy "
                      f"~{100 * pyspy_cores(asked_pyspy_hz, threads):.0f}% of a core")
        return b

    def _change(self, t_s: float, why: str, **rates: float) -> None:
        for k, v in rates.items():
            setattr(self.rates, k, int(v) if k == "pyspy_hz" else v)
        self.changes.append({"t_s": round(t_s, 1), **rates, "why": why})

    def observe(self, t_s: float, collectors_child_s: float) -> None:
        """Read what diagnose used since the last call and adjust. ``collectors_child_s``: CPU so
        far of the capture's child processes (py-spy windows, as the collector measured them, and
        the parsing child; not RUSAGE_CHILDREN, which also holds the live view's analyses)."""
        own = _collectors_s()
        now = time.monotonic()
        last, self._last = self._last, (now, own, collectors_child_s)
        if last is None or now - last[0] < 0.5:
            return
        dt = now - last[0]
        own_c, kids_c = (own - last[1]) / dt, max(0.0, (collectors_child_s - last[2]) / dt)
        used = own_c + kids_c + self.reserved_cores
        self.used_cores.append(round(used, 4))
        self._adjust(t_s, used, own_c, kids_c)

    def _adjust(self, t_s: float, used: float, own: float, kids: float) -> None:
        r, a = self.rates, self.asked
        if used > self.cores:
            why = f"used {100 * used:.0f}% of a core (py-spy {100 * kids:.0f}%), budget {self.pct_of_core:g}%"
            if own > self.cores / 2 and r.process_hz > MIN_PROCESS_HZ:
                # diagnose's own threads are mostly the per-thread /proc readings: halve them first
                self._change(t_s, process_hz=max(MIN_PROCESS_HZ, r.process_hz / 2), why=why)
                own /= 2
            room = self.cores - self.reserved_cores - own
            if kids > room:
                hz = max(MIN_PYSPY_HZ, int(r.pyspy_hz * max(0.1, room / max(kids, 1e-6)) * 0.9))
                if hz < r.pyspy_hz:
                    self._change(t_s, pyspy_hz=hz, why=why)
        elif used < RAISE_BELOW * self.cores and (r.pyspy_hz < a.pyspy_hz or r.process_hz < a.process_hz):
            why = f"used {100 * used:.0f}% of a core, under {RAISE_BELOW:.0%} of the budget"
            hz = min(a.pyspy_hz, int(r.pyspy_hz * 1.5) + 1)
            if kids > 0:  # py-spy's measured cost per Hz: the total stays under RAISE_TO of the budget
                hz = max(r.pyspy_hz, min(hz, int((RAISE_TO * self.cores - self.reserved_cores - own)
                                                 * r.pyspy_hz / kids)))
            self._change(t_s, pyspy_hz=hz, process_hz=min(a.process_hz, r.process_hz * 2), why=why)

    def to_json(self) -> dict[str, Any]:
        return {"pct_of_core": self.pct_of_core, "asked": vars(self.asked), "final": vars(self.rates),
                "reserved_pct_of_core": round(100 * self.reserved_cores, 2),
                "changes": self.changes[-50:], "used_pct_of_core_max": round(100 * max(self.used_cores, default=0), 1)}


__all__ = ["DEFAULT_PCT_OF_CORE", "FIXED_CAPTURE_CPU_S", "OverheadBudget", "Rates", "planned_process_rate",
           "planned_rate", "process_cores", "pyspy_cores", "reserve_cores"]

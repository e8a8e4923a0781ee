"""The collector interface shared by every signal source.

Life cycle: ``probe`` (no side effects on the target) -> ``start`` -> ``stop(timeout_s)``. Blocking
work (psutil, subprocess, pynvml) runs in a thread with a stop Event. A collector never raises into
the capture: failures end up as a ``CollectorStatus`` with state FAILED/PARTIAL and the reason.
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from diagnose.bundle import BundleWriter, CollectorState, CollectorStatus
from diagnose.collectors.priority import lower_this_thread
from diagnose.model import Target


class CollectorError(Exception):
    """A collector could not do its job; the message is the reason shown in the report."""


@dataclass(frozen=True)
class CaptureOptions:
    """What the user asked for (CLI flags of ``attach``)."""

    duration_s: float = 30.0
    # py-spy's sampling rate (Hz; --rate, default 50 there too). Each sampling round costs the target
    # itself, not only diagnose's CPU: on the demo's saturated service (2-core VM, closed loop, py-spy alone,
    # throughput against no attach, rates alternated in each run) 100 Hz kept 0.940x where 20 Hz kept
    # 0.988x, 0.975x where 20 Hz kept 1.015x, and 0.946x where 50 Hz kept 0.969x (the target's CPU a
    # request -2.3%; benchmarks/agent_cpu_per_request.py, 5-8 rounds; docs/measured.md). 50 Hz still gives
    # a 30 s capture 1,500 samples a thread, and a 5 s live window 250.
    rate_hz: int = 50
    native: bool = False
    subprocesses: bool = False
    process_hz: float = 10.0
    pyspy_window_s: float = 5.0
    pyspy_path: str | None = None
    skip: tuple[str, ...] = ()
    torch_window_s: float = 10.0  # agent: torch profiler window at the start of the capture (capped)
    agent_inject: bool = False  # agent: load it with sys.remote_exec (Python >= 3.14) when absent
    otlp_listen: str | None = None  # --otlp-listen HOST:PORT for the OTLP/HTTP receiver
    otlp_max_body_bytes: int = 8 * 1024 * 1024
    gpu_rate_hz: float = 10.0  # NVML polling rate (GPM and DCGM run slower, see their modules)
    dcgm_url: str | None = None  # --dcgm: dcgm-exporter /metrics URL or dcgm://HOST[:PORT]
    metrics_url: str | None = None  # --metrics: the serving engine's Prometheus /metrics URL
    overhead_budget_pct: float = 10.0  # --overhead-budget: diagnose's CPU, % of one core (capture/budget.py)


@dataclass(frozen=True)
class Probe:
    available: bool
    reason: str | None = None


def target_alive(target: Target) -> bool:
    """True while the same process (pid and start time) still runs and is not a zombie."""
    import psutil

    try:
        p = psutil.Process(target.pid)
        return bool(p.create_time() == target.create_time and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def target_threads(target: Target) -> int:
    """The target's threads now (1 when it cannot be read): the overhead budget's first plan."""
    import psutil

    try:
        return int(psutil.Process(target.pid).num_threads())
    except psutil.Error:
        return 1


class Collector(ABC):
    """Base for collectors. Subclasses set ``name`` and implement probe/start/stop."""

    name: str = "collector"
    stop_timeout_s: float = 10.0  # how long the capture waits for ``stop`` (the agent's is longer)

    @abstractmethod
    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        """Check that the collector can run, without touching the target."""

    @abstractmethod
    def start(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        """Begin collecting; must return promptly (work happens in threads/children)."""

    @abstractmethod
    def stop(self, timeout_s: float) -> CollectorStatus:
        """Stop, flush streams and return the final status within about ``timeout_s``."""

    def counts(self) -> dict[str, Any]:
        """Live counters for the progress line (e.g. samples so far)."""
        return {}

    def adjust(self, rates: Any) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Take the overhead budget's rates (diagnose/capture/budget.py Rates); most collectors
        have none to lower."""

    def child_cpu_s(self) -> float:
        """CPU seconds so far of a child process still running (not yet in RUSAGE_CHILDREN)."""
        return 0.0


class ThreadedCollector(Collector):
    """A collector whose work is a loop in one thread, woken every ``period_s`` until stopped."""

    period_s: float = 0.1

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._partial_reason: str | None = None
        self._streams: list[str] = []
        self._abandoned = False  # stop() gave up waiting for the thread: it must write nothing more

    def start(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self._setup(target, options, bundle)
        self._thread = threading.Thread(
            target=self._loop, name=f"diagnose-{self.name}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        lower_this_thread()  # a saturated target keeps its cores (collectors/priority.py)
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                if not self.tick():
                    return
                next_t += self.period_s
                delay = next_t - time.monotonic()
                if delay < 0:  # fell behind: do not try to catch up in a burst
                    next_t = time.monotonic()
                    delay = 0
                self._stop.wait(delay)
        except CollectorError as exc:
            self._error = exc
        except Exception as exc:  # a collector must never take the capture down
            self._error = CollectorError(f"{type(exc).__name__}: {exc}")

    def stop(self, timeout_s: float) -> CollectorStatus:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # a tick still busy: the capture's end is not held for it
                self._abandoned = True
                self._partial_reason = (f"still busy after the {timeout_s:g} s stop timeout (a reading "
                                        f"that took too long): left running, its last reading not recorded")
        self._teardown()
        if self._error is not None:
            state = CollectorState.PARTIAL if self.counts().get("records") else CollectorState.FAILED
            return CollectorStatus(self.name, state, str(self._error), self.counts(), self._streams)
        if self._partial_reason:
            return CollectorStatus(
                self.name, CollectorState.PARTIAL, self._partial_reason, self.counts(), self._streams
            )
        return CollectorStatus(self.name, CollectorState.OK, None, self.counts(), self._streams)

    @abstractmethod
    def _setup(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        """Open streams and take baselines (runs in the caller's thread)."""

    @abstractmethod
    def tick(self) -> bool:
        """Take one reading. Return False to end the loop (e.g. target gone)."""

    def _teardown(self) -> None:
        """Release resources after the loop ended."""

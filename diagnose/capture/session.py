"""Runs one capture: probe and start every collector, wait for the end, stop them, write the manifest.

The end comes at the deadline, when ``stop`` is set (Ctrl-C/SIGTERM), or when the target exits.
Every collector is isolated: a failure in one is recorded in the manifest and the others go on.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diagnose.bundle import BundleWriter, CollectorState, CollectorStatus, Manifest
from diagnose.bundle.records.manifest import TARGET_EXITED
from diagnose.capture.ahead import ParseAhead
from diagnose.capture.budget import PERIOD_S, OverheadBudget
from diagnose.capture.clock import SYSTEM_CLOCK, Clock
from diagnose.capture.cost import CostMeter, host_facts
from diagnose.collectors import COLLECTORS, CaptureOptions, Collector, priority
from diagnose.collectors.base import target_alive, target_threads
from diagnose.model import Target


@dataclass
class Progress:
    """A snapshot for the live progress line."""

    elapsed_s: float
    remaining_s: float
    counts: dict[str, dict[str, Any]]
    states: dict[str, str]


@dataclass
class CaptureResult:
    bundle_path: Path
    end_reason: str
    statuses: list[CollectorStatus]
    partial: bool
    bundle_identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the directory the capture wrote
    dir_fd: int | None = None  # a descriptor on it (the caller closes it), wherever another user moves it

    def source(self) -> Path:
        """Where to read the bundle: its path while that still names the directory the capture
        wrote, else that directory through ``dir_fd`` (another user swapped a component of
        ``--out`` during the capture)."""
        from diagnose.bundle.files import fd_path, open_dir

        if self.dir_fd is None or self.bundle_identity is None:
            return self.bundle_path
        try:
            fd = open_dir(self.bundle_path)
            st = os.fstat(fd)
            os.close(fd)
            if (st.st_dev, st.st_ino) == self.bundle_identity:
                return self.bundle_path
        except OSError:
            pass
        return fd_path(self.dir_fd)

    def close(self) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None

    @property
    def captured_anything(self) -> bool:
        return any(s.state in (CollectorState.OK, CollectorState.PARTIAL) for s in self.statuses)


@dataclass
class Capture:
    target: Target
    options: CaptureOptions
    out_dir: Path
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    collectors: tuple[Collector, ...] | None = None
    clock: Clock = SYSTEM_CLOCK  # the loop's time and waits; tests pass a FakeClock
    # Set as soon as the bundle directory exists, so a live view can read the partial bundle.
    bundle_path: Path | None = field(default=None, init=False)
    budget: OverheadBudget = field(init=False)
    # parses the bundle's py-spy windows and torch traces while it is written (started with the bundle)
    ahead: ParseAhead | None = None

    def run(
        self, stop: threading.Event, on_progress: Callable[[Progress], None] | None = None
    ) -> CaptureResult:
        collectors = self.collectors or tuple(c() for c in COLLECTORS)
        priority.reset()
        meter = CostMeter()
        self.budget = OverheadBudget.plan(self.options.overhead_budget_pct, self.options.rate_hz,
                                          self.options.process_hz, target_threads(self.target),
                                          self.options.duration_s)
        for c in collectors:
            c.adjust(self.budget.rates)
        started_ns = self.clock.time_ns()
        when = datetime.fromtimestamp(started_ns / 1e9, timezone.utc)
        writer = BundleWriter.create(self.out_dir, self.target.pid, when)
        self.bundle_path = writer.path
        if self.ahead is not None:
            self.ahead.start(writer.path)
        statuses = self._probe_and_start(collectors, writer)
        try:
            self._write_manifest(writer, started_ns, None, "capturing", statuses.values())
            end_reason = self._wait(collectors, statuses, stop, on_progress)
        finally:  # a full disk or any error: started collectors (and py-spy children) still stop
            priority.restore_all()  # their last readings and py-spy's last window get a core now
            final = self._stop_all(collectors, statuses)
        ended_ns = self.clock.time_ns()
        partial = end_reason != "duration reached" or any(
            s.state == CollectorState.PARTIAL for s in final
        )
        self._write_manifest(writer, started_ns, ended_ns, end_reason, final, partial,
                             meter.finish(self.ahead.cpu_s() if self.ahead is not None else None)
                             | {"collector_priority": priority.applied()})
        identity, dir_fd = writer.identity, os.dup(writer.fd)
        writer.close()
        return CaptureResult(writer.path, end_reason, final, partial, identity, dir_fd)

    def _probe_and_start(self, collectors: tuple[Collector, ...], writer: BundleWriter) -> dict[str, CollectorStatus]:
        def probe_start(c: Collector) -> CollectorStatus:
            if c.name in self.options.skip:
                return CollectorStatus(c.name, CollectorState.UNAVAILABLE, f"skipped (--skip {c.name})")
            try:
                probe = c.probe(self.target, self.options)
                if not probe.available:
                    return CollectorStatus(c.name, CollectorState.UNAVAILABLE, probe.reason)
                c.start(self.target, self.options, writer)
                return CollectorStatus(c.name, CollectorState.RUNNING)
            except Exception as exc:  # isolation: one broken collector never stops the capture
                return CollectorStatus(c.name, CollectorState.FAILED, f"{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(max_workers=len(collectors)) as pool:
            return {s.name: s for s in pool.map(probe_start, collectors)}

    def _wait(self, collectors: tuple[Collector, ...], statuses: dict[str, CollectorStatus], stop: threading.Event,
              on_progress: Callable[[Progress], None] | None) -> str:
        t0 = self.clock.monotonic_s()
        deadline = t0 + self.options.duration_s
        running = [c for c in collectors if statuses[c.name].state == CollectorState.RUNNING]
        budget_at = t0
        while True:
            now = self.clock.monotonic_s()
            if now - budget_at >= PERIOD_S:
                budget_at = now
                self._keep_budget(running, now - t0)
            if on_progress is not None:
                on_progress(Progress(
                    now - t0, max(0.0, deadline - now),
                    {c.name: c.counts() for c in running},
                    {n: s.state.value for n, s in statuses.items()},
                ))
            if stop.is_set():
                return getattr(stop, "reason", None) or "interrupted"
            if now >= deadline:
                return "duration reached"
            if not target_alive(self.target):
                return TARGET_EXITED
            if not running:
                return "no collector could start"
            self.clock.wait(stop, min(0.25, max(0.0, deadline - now)))

    def _keep_budget(self, running: list[Collector], t_s: float) -> None:
        ahead_s = self.ahead.cpu_s() if self.ahead is not None else 0.0  # its parse grows with py-spy's
        self.budget.observe(t_s, sum(c.child_cpu_s() for c in running) + ahead_s)
        for c in running:
            c.adjust(self.budget.rates)

    def _stop_all(self, collectors: tuple[Collector, ...],
                  statuses: dict[str, CollectorStatus]) -> list[CollectorStatus]:
        def stop_one(c: Collector) -> CollectorStatus:
            if statuses[c.name].state != CollectorState.RUNNING:
                return statuses[c.name]
            try:
                return c.stop(c.stop_timeout_s)
            except Exception as exc:
                return CollectorStatus(c.name, CollectorState.FAILED, f"stop failed: {exc}")

        with ThreadPoolExecutor(max_workers=len(collectors)) as pool:
            return list(pool.map(stop_one, collectors))

    def _write_manifest(self, writer: BundleWriter, started_ns: int, ended_ns: int | None, end_reason: str,
                        statuses: Iterable[CollectorStatus], partial: bool = True,
                        cost: dict[str, Any] | None = None) -> None:
        extra: dict[str, Any] = {"host": host_facts(), "budget": self.budget.to_json()} | (
            {"cost": cost} if cost else {})
        writer.write_manifest(Manifest.build(
            target=self.target.to_json(), collectors=statuses, started_ns=started_ns, ended_ns=ended_ns,
            end_reason=end_reason, partial=partial, options=asdict(self.options), command=self.command,
            extra=extra))

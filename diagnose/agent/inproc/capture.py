"""One capture inside the target: torch window, spans and GC pauses for a bounded time.

Runs on its own thread (``diagnose-agent-capture``) so the control socket answers at once and the
serving threads keep serving. It wakes every DRAIN_PERIOD_S to move queued spans and GC pauses to
the bundle streams (the hot-path hooks only append to deques), plans the torch windows and hands
each to the one long-lived profiler thread (torchthread.py), which starts, guards and stops it,
and stops at the deadline or on ``request_stop``. It sleeps on one event, set by the stop and by
the profiler thread when a window ends: each wake takes the GIL from the serving threads, and on a
host whose CPUs are all busy each handoff waits for a CPU (it polled a running window every 50 ms).
Writes the streams SPANS, GC, TORCH and TORCH_TRACES (diagnose/bundle/streams.py).

Span work is budgeted (spanbudget.py): spans are taken in batches of BATCH_SPANS and, once the
capture thread has held the GIL for GIL_HOLD_S of its CPU, it sleeps YIELD_S, for at most
DRAIN_SLICE_S per wake (the rest waits in the queue), its CPU time measured; over SPAN_CPU_SHARE of
a core the sampler keeps fewer traces. The first drain comes FIRST_DRAIN_S after the start, so the
fraction falls before the spans kept under the first one (all of them) pile up. When the capture
ends the hooks are unset at once and at most STOP_DRAIN_S is spent converting what is queued; the
rest is discarded and counted as dropped, so the target is not left converting after attach returns.

Why the yield sleeps: a serving event loop gives the GIL up at each system call, so a thread that
only yields (``sleep(0)``) wins it back within microseconds, and a request in flight during a drain
waited out most of the drain's CPU (2 ms holds: P99 x1.3-1.4 with spans alone, closed loop). Sleeping
between short holds bounds what one request can wait to about GIL_HOLD_S per YIELD_S. The yield is
by CPU held, not by batch: against a target that runs Python flat out, each yield also costs the
capture thread a switch interval (sys.getswitchinterval(), 5 ms) before it has the GIL again, and
yielding after every batch (also after batches the fraction had since left out, ~4 us a span, no
conversion) moved ~13k spans/s at best.

``report()`` says, per part (torch, spans, gc), ``ok``, ``skipped`` (not requested), ``unavailable``
or ``failed``, with the reason.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.agent.inproc import spanbudget, torchthread
from diagnose.agent.inproc import spans as span_hooks
from diagnose.agent.inproc.gcpause import GcRecorder
from diagnose.agent.inproc.records import SpanCounts, count_record
from diagnose.agent.inproc.torchwin import DEFAULT_WINDOW_S, MAX_WINDOW_S, TorchWindow, torch_unavailable_reason
from diagnose.agent.inproc.windowplan import (
    DUTY_SHARE,
    STALL_BUDGET_S,
    STALL_SHARE,
    WindowStats,
    cpu_cap_s,
    duty_budget_s,
    next_window,
)
from diagnose.bundle import BundleWriter
from diagnose.bundle.streams import GC, SPANS, TORCH

MAX_CAPTURE_S = 3600.0
DRAIN_PERIOD_S = 0.5
FIRST_DRAIN_S = spanbudget.REVIEW_S  # the first drain and review: the fraction falls before a backlog builds
BATCH_SPANS = 16  # taken from the queue at a time: ~0.1-0.2 ms converting when all are kept
WRITE_SPANS = 64  # records converted before one write (~0.2 ms encoding them)
GIL_HOLD_S = 0.0005  # the capture thread's CPU between two yields of the GIL
YIELD_S = 0.002  # a yield sleeps: the serving threads get the GIL for this long, not until their next system call
DRAIN_SLICE_S = 0.1  # the most one wake spends converting spans (wall time, yields included)
STOP_DRAIN_S = 0.5  # the most the end of a capture spends converting what is still queued
TORCH_STOP_WAIT_S = 10.0  # a stop waits for quiet (quiesce.py): past this the capture goes on without it
OK, SKIPPED, UNAVAILABLE, FAILED = "ok", "skipped", "unavailable", "failed"


@dataclass(frozen=True)
class CaptureRequest:
    out_dir: Path
    duration_s: float
    torch_window_s: float = DEFAULT_WINDOW_S
    torch: bool = True
    spans: bool = True
    gc: bool = True
    record_shapes: bool = True
    with_flops: bool = True
    with_stack: bool = False
    record_function: bool = True

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> CaptureRequest:
        """Bounded: duration in (0, MAX_CAPTURE_S], torch window in [0, min(MAX_WINDOW_S, duration)]."""
        duration = min(max(float(args["duration_s"]), 0.1), MAX_CAPTURE_S)
        window = min(max(float(args.get("torch_window_s", DEFAULT_WINDOW_S)), 0.0), MAX_WINDOW_S, duration)
        known = {k: v for k, v in args.items() if k in cls.__dataclass_fields__ and k not in
                 ("out_dir", "duration_s", "torch_window_s")}
        return cls(Path(args["out_dir"]), duration, window, **known)


@dataclass
class Part:
    state: str = OK
    reason: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "counts": dict(self.counts)}


class CaptureSession:
    """Threading contract: construct and ``start`` on the control thread; ``request_stop`` and
    ``report`` from any thread; everything else runs on the capture thread."""

    def __init__(self, capture_id: int, request: CaptureRequest, out_dir: Path, bridge: Any):
        self.capture_id = capture_id
        self.request = request
        self.out_dir = out_dir
        self.bridge = bridge
        self.parts = {"torch": Part(), "spans": Part(), "gc": Part()}
        self.started_ns = time.time_ns()
        self._started_at = time.monotonic()
        self.ended_ns: int | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by request_stop and by the end of a torch window
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer = BundleWriter(out_dir)
        self._sink = span_hooks.SpanSink()
        self._gc = GcRecorder()
        # the running window: (window, its end-early event, its job on the profiler thread)
        self._torch: tuple[TorchWindow, threading.Event, torchthread.Job] | None = None
        self._torch_windows: list[WindowStats] = []
        self._torch_cut_early = 0
        self._torch_next: tuple[float, float] | None = None  # (monotonic start, window s) of the next window
        self._torch_first_at: float | None = None
        self._torch_reason = ""
        self._span_counts = SpanCounts()
        self._span_budget = spanbudget.SpanBudget(self.started_ns, share=spanbudget.SPAN_CPU_SHARE)
        self._span_levels = [0] * (spanbudget.MAX_LEVEL + 1)  # spans written, by the halvings they survive
        self._spans_left_out = 0  # queued under a higher fraction, left out when taken
        self._spans_discarded = 0  # still queued when the stop's drain ran out
        self._spans_end_ns: int | None = None  # when the hooks were unset
        self._drained_at = 0.0
        self.phase = "capturing"  # what the capture thread does now: said by status while attach waits

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="diagnose-agent-capture", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wait(self, timeout_s: float) -> bool:
        return self._done.wait(timeout_s)

    def _run(self) -> None:
        try:
            self._begin()
            self._loop()
        except Exception as exc:  # the capture thread must end with a report, never kill the target
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                self._finish()
            except Exception as exc:  # e.g. the target's exit closed what it writes to: a report, no traceback
                self.error = self.error or f"{type(exc).__name__}: {exc}"
            self.ended_ns = time.time_ns()
            self._done.set()

    def _begin(self) -> None:
        r = self.request
        self._begin_spans(r)
        if r.gc:
            self._gc.install()
        else:
            self.parts["gc"] = Part(SKIPPED, "not requested")
        self._begin_torch(r)

    def _begin_spans(self, r: CaptureRequest) -> None:
        if not r.spans:
            self.parts["spans"] = Part(SKIPPED, "not requested")
            return
        span_hooks.HOOKS.sink = self._sink
        reason = span_hooks.attach()
        if reason:
            self.parts["spans"] = Part(UNAVAILABLE, reason)

    def _begin_torch(self, r: CaptureRequest) -> None:
        if not r.torch or r.torch_window_s <= 0:
            self.parts["torch"] = Part(SKIPPED, "not requested (torch window 0 s)")
            return
        reason = torch_unavailable_reason()
        if reason:
            self.parts["torch"] = Part(UNAVAILABLE, reason)
            return
        self._schedule_torch(time.monotonic())

    def _schedule_torch(self, now: float) -> None:
        """Plan the next window from the ones done (diagnose/agent/inproc/windowplan.py)."""
        elapsed = now - self._torch_first_at if self._torch_first_at is not None else 0.0
        nxt = next_window(self._torch_windows, self.request.torch_window_s, elapsed, self.request.duration_s)
        if nxt is None:
            self._torch_next = None
            return
        self._torch_next = (now + nxt.gap_s, nxt.window_s)
        self._torch_reason = nxt.reason

    def _start_torch(self, now: float) -> None:
        """Hand the next window to the profiler thread, which starts, guards and stops it."""
        assert self._torch_next is not None
        window_s = self._torch_next[1]
        self._torch_next = None
        r = self.request
        window = TorchWindow(self.out_dir, len(self._torch_windows) + 1, r.record_shapes, r.with_flops, r.with_stack)
        if r.record_function and self.bridge is not None:
            self.bridge.torch_on = True
        close = self.bridge.close_torch_ranges if self.bridge is not None else None
        cap, end_early = cpu_cap_s(self._torch_windows), threading.Event()
        self._torch = (window, end_early, torchthread.THREAD.submit(
            lambda: window.run(window_s, cap, end_early, close), "a torch window", self._wake))
        self._torch_first_at = self._torch_first_at or now

    def _torch_wake(self) -> float | None:
        """Monotonic time of the next torch start, if any (a running window's end sets ``_wake``)."""
        return self._torch_next[0] if self._torch is None and self._torch_next is not None else None

    def _loop(self) -> None:
        deadline = time.monotonic() + self.request.duration_s
        self._drained_at = time.monotonic() - DRAIN_PERIOD_S + FIRST_DRAIN_S
        while True:
            now = time.monotonic()
            wake = self._torch_wake()
            timeout = min(max(0.0, self._drained_at + DRAIN_PERIOD_S - now), max(0.0, deadline - now),
                          max(0.0, wake - now) if wake else DRAIN_PERIOD_S)
            self._wake.wait(timeout)
            self._wake.clear()
            if self._stop.is_set():
                break
            now = time.monotonic()
            if self._torch is not None and self._torch[2].done.is_set():
                self._end_torch(0.0)
                self._schedule_torch(time.monotonic())
            elif self._torch is None and self._torch_next is not None and now >= self._torch_next[0]:
                self._start_torch(now)
            if now >= self._drained_at + DRAIN_PERIOD_S:
                self._drain()
                self._drained_at = now
            if now >= deadline:
                break
            if self.parts["spans"].state == UNAVAILABLE and self.request.spans:
                self._retry_attach()  # the application may configure tracing while we capture

    def _retry_attach(self) -> None:
        if span_hooks.attach() is None:
            self.parts["spans"] = Part()

    def _end_torch(self, wait_s: float) -> None:
        """Collect the running window's record, waiting up to ``wait_s`` (s) for its stop. A stop
        that outwaits it goes on on the profiler thread (it finalizes once quiet, and writes
        nothing) and this capture records why."""
        if self._torch is None:
            return
        (window, end_early, job), self._torch = self._torch, None
        end_early.set()
        self.phase = "stopping and exporting a torch window"
        try:
            record = job.result(wait_s)
        except torchthread.JobTimeout:
            window.abandoned = True
            record = self._unfinished(window)
        except RuntimeError as exc:
            self._end_torch_mirror()
            self.parts["torch"] = Part(FAILED, f"torch profiler did not start: {exc}")
            self._torch_next = None
            return
        finally:
            self.phase = "capturing"
        self._end_torch_mirror()
        if not record["error"]:
            self._torch_windows.append(WindowStats((record["stopping_ns"] - record["start_ns"]) / 1e9,
                                                   int(record["events"] or 0), record["stop_s"], record["export_s"],
                                                   record["cpu_s"]))
            self._torch_cut_early += bool(record.get("cut_by_cpu"))
            record.update(self._duty())
        self._writer.stream(TORCH.name).write(record)
        part = self.parts["torch"]
        if record["error"]:
            part.state, part.reason = FAILED, f"torch window {len(self._torch_windows) + 1} failed: {record['error']}"
            self._torch_next = None
        elif record.get("note"):
            part.reason = record["note"]
        part.counts = self._torch_counts()

    @staticmethod
    def _unfinished(window: TorchWindow) -> dict[str, Any]:
        waiting = ", ".join(window.waiting_for[:3]) or "the profiler thread"
        now = time.time_ns()
        return {"file": None, "start_ns": window.start_ns or None, "stopping_ns": now, "end_ns": now,
                "error": f"the stop waited {TORCH_STOP_WAIT_S:.0f} s for {waiting} to leave a call that may be "
                         "a torch op begun in the window (finalizing earlier could crash the target); the "
                         "window is discarded when it ends"}

    def _duty(self) -> dict[str, Any]:
        """The profiled share so far: the windows' time over the time since the capture started."""
        profiled = sum(w.window_s for w in self._torch_windows)
        elapsed = max(time.monotonic() - self._started_at, 1e-9)
        return {"profiled_s_total": round(profiled, 4), "capture_elapsed_s": round(elapsed, 3),
                "profiled_share_pct": round(100 * profiled / elapsed, 2)}

    def _torch_counts(self) -> dict[str, Any]:
        ws = self._torch_windows
        duty = {"torch_profiled_share_pct": self._duty()["profiled_share_pct"],
                "torch_duty_budget_pct": DUTY_SHARE * 100,
                "torch_profiled_budget_s": round(duty_budget_s(self.request.torch_window_s,
                                                               self.request.duration_s), 3)}
        return {**duty, "torch_traces": len(ws), "torch_window_s": round(sum(w.window_s for w in ws), 3),
                "torch_events": sum(w.events for w in ws),
                "torch_hold_max_ms": round(1e3 * max((w.hold_s for w in ws), default=0.0), 1),
                "torch_hold_total_ms": round(1e3 * sum(w.total_hold_s for w in ws), 1),
                "torch_hold_budget_ms": STALL_BUDGET_S * 1e3, "torch_hold_share_budget_pct": STALL_SHARE * 100,
                "torch_windows_cut_by_cpu": self._torch_cut_early, "torch_plan": self._torch_reason}

    def _end_torch_mirror(self) -> None:
        if self.bridge is not None:
            self.bridge.torch_on = False

    def _drain(self, span_limit_s: float | None = None) -> None:
        """Queued spans (for at most ``span_limit_s``, default DRAIN_SLICE_S) and GC pauses to the streams."""
        if self.request.spans and self._sink.finished:
            self._drain_spans(self._writer.stream(SPANS.name), DRAIN_SLICE_S if span_limit_s is None else span_limit_s)
        pauses = self._gc.drain()
        if pauses:
            gc_stream = self._writer.stream(GC.name)
            for p in pauses:
                gc_stream.write(p)

    def _drain_spans(self, stream: Any, limit_s: float) -> None:
        """Convert queued spans in batches, yielding the GIL after each GIL_HOLD_S of CPU, for at
        most ``limit_s``, and write them in one write per WRITE_SPANS records (each write gives the
        GIL up in the system call: one more handoff for the capture thread to win back). The CPU
        of each batch is charged to the budget (its conversion and write apart: the cost per
        span), which may lower the sink's bound."""
        budget, sink = self._span_budget, self._sink
        until = time.monotonic() + limit_s
        held_from = time.thread_time()
        records: list[dict[str, Any]] = []
        while sink.finished:
            t0 = time.thread_time()
            kept, left_out = span_hooks.split_kept(sink.take(BATCH_SPANS), budget.bound)
            self._spans_left_out += left_out
            t1 = time.thread_time()
            converted = self._convert_spans(kept, records)
            if len(records) >= WRITE_SPANS:
                stream.write_many(records)
                records = []
            t2 = time.thread_time()
            budget.charge(t2 - t1, converted, t1 - t0)
            if budget.review(time.time_ns(), sink.seen):
                sink.bound = budget.bound
            if t2 - held_from >= GIL_HOLD_S:
                time.sleep(YIELD_S)  # let the application's threads have the GIL
                held_from = time.thread_time()
            if time.monotonic() >= until:
                break
        if records:
            t0 = time.thread_time()
            stream.write_many(records)
            budget.charge(time.thread_time() - t0, 0)

    def _convert_spans(self, spans: list[tuple[int, Any]], records: list[dict[str, Any]]) -> int:
        """Convert ``(trace key, span)`` pairs, appending the records to ``records``; returns how many."""
        before = len(records)

        def on_record(rec: dict[str, Any], key: int) -> None:
            records.append(rec)
            count_record(self._span_counts, rec)
            self._span_levels[spanbudget.level(key)] += 1

        span_hooks.convert(spans, on_record, self._span_counts.reject)
        return len(records) - before

    def _write_spans(self, stream: Any, spans: list[tuple[int, Any]]) -> int:
        """Convert ``(trace key, span)`` pairs and write them in one write; returns how many."""
        records: list[dict[str, Any]] = []
        n = self._convert_spans(spans, records)
        stream.write_many(records)
        return n

    def _finish(self) -> None:
        if span_hooks.HOOKS.sink is self._sink:
            span_hooks.HOOKS.sink = None
        self._spans_end_ns = time.time_ns()  # no span is queued after this
        self._gc.remove()
        self._end_torch(TORCH_STOP_WAIT_S)
        if self._torch_windows:  # the profiled share of the whole capture, not of its time to the last window
            self.parts["torch"].counts = self._torch_counts()
        self.phase = "writing queued spans"
        self._drain(STOP_DRAIN_S)
        self._spans_discarded = self._sink.discard_queued()
        still_open = self._sink.take_open()
        if still_open and self.request.spans:
            kept = span_hooks.split_kept(still_open, self._span_budget.bound)[0]
            self._write_spans(self._writer.stream(SPANS.name), kept)
        self._writer.close()
        self.parts["spans"].counts = self._spans_json(time.time_ns())
        self.parts["gc"].counts = {"gc_pauses": self._gc.recorded, "gc_dropped": self._gc.dropped}

    def _spans_json(self, now_ns: int) -> dict[str, Any]:
        """The spans part's counts: what was recorded, dropped and sampled, and what it cost."""
        sink, budget = self._sink, self._span_budget
        counts = self._span_counts.to_json()
        if sink.unreadable or sink.unreadable_starts:
            counts["spans_rejected"]["unreadable:hook"] = sink.unreadable + sink.unreadable_starts
        final_level = budget.one_in.bit_length() - 1
        return {**counts, "spans_dropped": sink.dropped,
                "spans_dropped_ranges_ns": [list(r) for r in sink.drop_ranges],
                "spans_window_ns": [self.started_ns, self._spans_end_ns or now_ns],
                "spans_seen": sink.seen, "spans_sampled_out": sink.sampled_out + self._spans_left_out,
                "spans_kept": sum(self._span_levels[final_level:]),
                "spans_discarded_at_stop": self._spans_discarded,
                "spans_keep_fraction": budget.fraction,
                "spans_keep_history": [[t, f] for t, f in budget.history],
                "spans_cpu_s": round(budget.cpu_s, 4),
                "spans_cpu_pct": round(100 * budget.cpu_share(now_ns), 2),
                "spans_cpu_budget_pct": round(100 * budget.share, 2)}

    def report(self) -> dict[str, Any]:
        return {
            "capture_id": self.capture_id, "pid": os.getpid(), "out_dir": str(self.out_dir),
            "started_ns": self.started_ns, "ended_ns": self.ended_ns, "running": self.running,
            "phase": self.phase if self.running else "done",
            "duration_s": self.request.duration_s, "torch_window_s": self.request.torch_window_s,
            "parts": {name: part.to_json() for name, part in self.parts.items()},
            "error": self.error,
        }

    def abandon(self) -> None:
        """In a forked child: this capture belongs to the parent; unhook without writing."""
        if span_hooks.HOOKS.sink is self._sink:
            span_hooks.HOOKS.sink = None
        self._gc.remove()
        self._done.set()

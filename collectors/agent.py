"""Agent collector: drives the in-process agent of the target (torch profiler window, spans, GC).

probe: finds the agent of the pid (``diagnose.agent.host.client``); without one the status is
``unavailable`` with what is missing (kernel timeline, stage spans) and how to enable it.
start: asks the agent for a capture of the capture window into the bundle (or, with ``--inject``
on Python >= 3.14, first loads the agent with sys.remote_exec). stop: ends the agent's capture,
waits for its report, collects files it had to stage elsewhere, and maps the report to a status.

Streams (written by the agent inside the target): SPANS, GC, TORCH and TORCH_TRACES
(diagnose/bundle/streams.py); see diagnose/agent/inproc/capture.py.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from diagnose.bundle import BundleWriter, CollectorState, CollectorStatus
from diagnose.bundle.streams import GC, SPANS, TORCH, TORCH_TRACES
from diagnose.collectors.base import CaptureOptions, Collector, CollectorError, Probe, target_alive
from diagnose.model import Target

STREAMS = [s.name for s in (SPANS, GC, TORCH, TORCH_TRACES)]
# The agent ends by itself this long after the capture should have stopped it (a killed attach).
GRACE_S = 5.0
POLL_S = 0.1
CALL_TIMEOUT_S = 5.0
# attach waits this long for the agent to finish after the capture: a torch window still stopping
# and exporting (bounded by the window plan, agent/inproc/windowplan.py) is waited for, not lost.
FINISH_WAIT_S = 30.0
LATE_S = 1.0  # a finish this long after the stop is said in the report


def missing_reason(pid: int, cause: str) -> str:
    """What the report lacks without the agent, and the ways to enable it."""
    from diagnose.agent.host.inject import unsupported_reason

    inject = "" if unsupported_reason() else ", or attach with --inject"
    return (f"{cause}: no kernel timeline (torch profiler), no stage spans (OpenTelemetry) and no GC "
            f"pauses from inside pid {pid}; enable them by starting the service with "
            "`diagnose run -- <command>`, by calling `import diagnose.agent; diagnose.agent.start()` "
            f"in it, or with DIAGNOSE_AGENT=1 and the preload on PYTHONPATH (`diagnose run --print-env`){inject}")


class AgentCollector(Collector):
    name = "agent"
    stop_timeout_s = FINISH_WAIT_S

    def __init__(self) -> None:
        self._alive: Any = None
        self._handle: Any = None
        self._inject = False
        self._report: dict[str, Any] | None = None
        self._bundle_dir: Path | None = None
        self._out_dir: Path | None = None
        self._staging: Path | None = None  # created by diagnose for a target of another uid
        self._staging_id: tuple[int, int] | None = None
        self._refused: str | None = None
        self._uid = -1

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        from diagnose.agent.host.client import AgentUnavailable, find_agent
        from diagnose.agent.host.inject import unsupported_reason

        try:
            self._handle = find_agent(target.pid)
            return Probe(True)
        except AgentUnavailable as exc:
            cause = str(exc)
        if options.agent_inject:
            reason = unsupported_reason()
            if reason is None:
                self._inject = True
                return Probe(True)
            return Probe(False, f"{cause}; {reason}")
        from diagnose.agent.host.absent import why_no_agent

        return Probe(False, why_no_agent(target.pid) or missing_reason(target.pid, cause))

    def start(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        from diagnose.agent.inproc import protocol
        if self._handle is None and self._inject:
            from diagnose.agent.host.inject import InjectError, inject

            try:
                self._handle = inject(target.pid, target.uid, lambda: target_alive(target))
            except InjectError as exc:
                raise CollectorError(str(exc)) from None
        self._bundle_dir = bundle.path
        self._uid = target.uid
        self._alive = lambda: target_alive(target)
        out_dir = str(bundle.path)
        if target.uid != os.geteuid():  # the agent cannot write our 0700 bundle: a directory we make, handed over
            from diagnose.collectors.agent_staging import StagingRefused, create_staging

            try:
                self._staging, out_dir, self._staging_id = create_staging(self._handle.path, target.uid)
            except StagingRefused as exc:
                raise CollectorError(str(exc)) from None
        try:
            reply = self._handle.call(
                "capture", out_dir=out_dir, duration_s=options.duration_s + GRACE_S,
                torch_window_s=options.torch_window_s)
        except (OSError, protocol.ProtocolError) as exc:
            self._remove_staging()
            raise CollectorError(f"the agent of pid {target.pid} did not take the capture: {exc}") from None
        if not reply.get("ok"):
            self._remove_staging()
            raise CollectorError(f"the agent refused the capture: {reply['error']['message']}")
        said = str(reply.get("out_dir") or out_dir)
        if said != out_dir:  # the reply names no path root acts on
            self._refused = f"the agent wrote to {said[:120]!r}, not the directory diagnose gave it: ignored"
        self._out_dir = Path(out_dir)

    def _remove_staging(self) -> None:
        """The staging directory diagnose made, if still empty (the agent never took it)."""
        if self._staging is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._staging)

    def counts(self) -> dict[str, Any]:
        return _flat_counts(self._report) if self._report else {}

    def stop(self, timeout_s: float) -> CollectorStatus:
        from diagnose.agent.inproc import protocol
        t0 = time.monotonic()
        try:
            reply, unanswered_s = self._await_finish(t0 + timeout_s)
        except (OSError, protocol.ProtocolError) as exc:
            if self._bundle_dir is not None and self._out_dir in (None, self._bundle_dir):
                from diagnose.collectors.agent_staging import remove_partial_traces

                remove_partial_traces(self._bundle_dir)
            written = [s for s in STREAMS if self._bundle_dir is not None and (self._bundle_dir / s).exists()]
            state = CollectorState.PARTIAL if written else CollectorState.FAILED
            return CollectorStatus(self.name, state, f"lost the agent during the capture (target exited?): "
                                   f"{exc}; kept what it had written: {', '.join(written) or 'nothing'}",
                                   {}, STREAMS)
        waited_s = time.monotonic() - t0
        self._report = reply.get("report") if reply is not None else None
        if reply is None or not reply.get("ok") or not self._report:
            why = (f"the agent did not answer for {unanswered_s:.1f} s while the target ran (a torch window's "
                   "export holding the interpreter?)" if reply is None else "the agent returned no report")
            return CollectorStatus(self.name, CollectorState.FAILED, why, {"agent_wait_s": round(waited_s, 2)},
                                   STREAMS)
        wait = {"agent_wait_s": round(waited_s, 2), "agent_unanswered_s": round(unanswered_s, 2)}
        if reply.get("state") == "capturing":
            phase = str(self._report.get("phase") or "capturing")
            torch = self._report.get("parts", {}).get("torch", {}).get("state") not in ("skipped", "unavailable")
            later = ("; a torch trace it finishes later lands in the bundle and `diagnose report BUNDLE` includes it"
                     if torch else "")
            return CollectorStatus(self.name, CollectorState.PARTIAL,
                                   f"the agent was still {phase[:80]} {waited_s:.0f} s after the capture ended "
                                   f"(waited that long){later}",
                                   self.counts() | wait | ({"torch_export_pending": True} if torch else {}), STREAMS)
        refused = self._collect_staged()
        status = status_from_report(self.name, self._report)
        late = (f"the agent finished {waited_s:.1f} s after the capture ended ({unanswered_s:.1f} s of it "
                "unanswered: a torch window's stop and export); its trace is included"
                if waited_s >= LATE_S else None)
        reason = "; ".join(filter(None, (refused, late, status.reason))) or None
        state = CollectorState.PARTIAL if refused is not None else status.state
        return CollectorStatus(self.name, state, reason, status.counts | wait, STREAMS)

    def _await_finish(self, deadline: float) -> tuple[dict[str, Any] | None, float]:
        """Ask the agent to stop and poll until its capture is done or ``deadline`` (monotonic).
        A call that times out, or finds the socket's backlog full, while the target lives is an
        agent busy under the GIL (the profiler's stop and export), not a lost one: polled again
        until the deadline. Returns the last reply (None when none came) and the seconds of calls
        left unanswered. Raises OSError or ProtocolError when the agent is gone (connection
        refused, target exited)."""
        reply: dict[str, Any] | None = None
        unanswered_s = 0.0
        op = "stop"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return reply, unanswered_s
            t = time.monotonic()
            try:
                reply = self._handle.call(op, min(CALL_TIMEOUT_S, max(0.1, left)))
            except (TimeoutError, BlockingIOError):  # no answer, or its accept backlog full (EAGAIN)
                if not self._target_alive():
                    raise
                time.sleep(POLL_S)
                unanswered_s += time.monotonic() - t
                continue  # resend the same op: stop is idempotent
            op = "status"
            if not reply.get("ok") or reply.get("state") != "capturing":
                return reply, unanswered_s
            time.sleep(POLL_S)

    def _target_alive(self) -> bool:
        return self._alive is None or self._alive()

    def _collect_staged(self) -> str | None:
        """Take the files the agent wrote into the staging directory diagnose made for it (target
        runs as another user) into the bundle, safely (collectors/agent_staging.py). Returns what
        was refused or left behind, or None."""
        from diagnose.collectors.agent_staging import StagingRefused, collect, remove_partial_traces

        if self._staging is None or self._bundle_dir is None:
            if self._bundle_dir is not None:
                remove_partial_traces(self._bundle_dir)  # the agent wrote into our bundle: no torn export stays
            return self._refused
        skipped: list[str] = []
        try:
            collect(self._staging, self._bundle_dir, self._uid, skipped, self._staging_id)
        except (StagingRefused, OSError) as exc:
            return "; ".join(filter(None, (self._refused, str(exc))))
        left = f"left in the staging directory: {'; '.join(skipped[:5])}" if skipped else None
        return "; ".join(filter(None, (self._refused, left))) or None


def _flat_counts(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in report.get("parts", {}).values():
        out.update(part.get("counts") or {})
    return out


def status_from_report(name: str, report: dict[str, Any]) -> CollectorStatus:
    """ok: every requested part ran; partial: some part could not (reason says which and why);
    failed: none did. Parts not requested (``skipped``) and notes only appear in the reason."""
    parts = report.get("parts", {})
    problems = [f"{part}: {p['reason']}" for part, p in parts.items() if p.get("state") in ("unavailable", "failed")]
    notes = [f"{part}: {p['reason']}" for part, p in parts.items()
             if p.get("state") in ("ok", "skipped") and p.get("reason")]
    if report.get("error"):
        problems.append(f"capture error: {report['error']}")
    working = [p for p in parts.values() if p.get("state") == "ok"]
    state = CollectorState.OK if not problems else (CollectorState.PARTIAL if working else CollectorState.FAILED)
    reason = "; ".join(problems + notes) or None
    return CollectorStatus(name, state, reason, _flat_counts(report), STREAMS)

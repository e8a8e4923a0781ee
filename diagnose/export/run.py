"""Run the ``--export`` targets of one Report, after its documents are written: each target
independently, a failure one warning line (cause and fix) that loses nothing and changes no exit
code; then, while a ``prometheus=:PORT`` server serves, hold for ``hold_s`` or until a signal.

The exporters are declared once, in ``EXPORTERS`` (one per ExportKind). Errors: none escape;
every OSError or ExportFailed becomes an Outcome with ``ok`` False.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diagnose.export.snapshot import Snapshot
from diagnose.export.targets import ExportKind, ExportTarget

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer


@dataclass(frozen=True)
class ExportRequest:
    """What the CLI collected: the targets, the ``--export-attr`` resource attributes, how long a
    Prometheus server keeps serving after the report (seconds), the OTLP timeout (seconds)."""

    targets: tuple[ExportTarget, ...]
    attrs: dict[str, str] = field(default_factory=dict)
    hold_s: float = 60.0
    timeout_s: float = 5.0


@dataclass(frozen=True)
class Outcome:
    """One target's result: ``line`` what the terminal shows (a warning when not ``ok``)."""

    target: ExportTarget
    ok: bool
    line: str
    server: Any = None  # a prometheus_client server that is serving (PROMETHEUS_HTTP)


def _otlp(snap: Snapshot, t: ExportTarget, req: ExportRequest) -> Outcome:
    from diagnose.export.otlp import ExportFailed, send

    try:
        sent = send(snap, t.url, req.timeout_s)
    except ExportFailed as exc:
        return Outcome(t, False, f"export {t.spec} failed: {exc}; {exc.fix}")
    return Outcome(t, True, f"exported {sent.points} metric points and {sent.log_records} findings (logs) "
                            f"to {t.url}")


def _prom_file(snap: Snapshot, t: ExportTarget, req: ExportRequest) -> Outcome:
    from diagnose.export.prometheus import write_file

    try:
        if t.path is None:  # parse_prometheus always sets it for this kind
            raise OSError(f"{t.spec!r} names no file")
        write_file(t.path, snap)
    except OSError as exc:
        return Outcome(t, False, f"export {t.spec} failed: cannot write {t.path}: {exc.strerror or exc}; "
                                 "choose a regular file in a directory you can write")
    return Outcome(t, True, f"wrote Prometheus metrics to {t.path}")


def _prom_http(snap: Snapshot, t: ExportTarget, req: ExportRequest) -> Outcome:
    from diagnose.export.prometheus import serve

    try:
        server = serve(t.host, t.port, snap)
    except OSError as exc:
        return Outcome(t, False, f"export {t.spec} failed: cannot listen on {t.host}:{t.port}: "
                                 f"{exc.strerror or exc}; choose a free port (or a HOST of this machine)")
    host = f"[{t.host}]" if ":" in t.host else t.host
    return Outcome(t, True, f"serving Prometheus metrics on http://{host}:{t.port}/metrics", server)


EXPORTERS: dict[ExportKind, Callable[[Snapshot, ExportTarget, ExportRequest], Outcome]] = {
    ExportKind.OTLP: _otlp, ExportKind.PROMETHEUS_FILE: _prom_file, ExportKind.PROMETHEUS_HTTP: _prom_http,
}


def environment_attributes() -> dict[str, str]:
    """The resource attributes of ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` (the SDK's
    own parser), so that every exporter, Prometheus too, carries what the environment says."""
    from opentelemetry.sdk.resources import OTELResourceDetector

    return {k: str(v) for k, v in OTELResourceDetector().detect().attributes.items()}


def run_exports(snap: Snapshot, req: ExportRequest) -> list[Outcome]:
    """Every target of ``req``, in order; servers are left serving (see ``hold``)."""
    return [EXPORTERS[t.kind](snap, t, req) for t in req.targets]


def hold(servers: list[WSGIServer], hold_s: float, say: Callable[[str], None],
         wake: threading.Event | None = None) -> None:
    """Keep ``servers`` serving for ``hold_s`` seconds, or until SIGINT/SIGTERM/SIGHUP (main thread:
    the handlers are installed for the wait and restored after) or ``wake`` is set; then shut them
    down. A signal here only ends the serving: the exit code stays the capture's."""
    if not servers:
        return
    done = wake or threading.Event()
    saved: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            saved[sig] = signal.signal(sig, lambda _n, _f: done.set())
    say(f"serving for {hold_s:g} s; Ctrl-C stops it")  # only now: a Ctrl-C after this line is handled
    try:
        done.wait(hold_s)
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)  # None: set from C
        for s in servers:
            s.shutdown()
            s.server_close()
    say("stopped serving Prometheus metrics")


__all__ = ["EXPORTERS", "ExportRequest", "Outcome", "environment_attributes", "hold", "run_exports"]

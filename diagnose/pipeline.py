"""The one orchestrator: ``attach`` (capture -> analyse -> write documents) and ``analyse``
(bundle -> Report). Every command and the TUI go through here and receive a Report; none analyses
on its own, so the ``--thresholds`` a user passes reach every view and every written document.

Errors: BundleError (not a bundle), ThresholdError (bad override), FanoutError (``--scheduler``
unusable, a worker died), TargetError (no such pid, already attached), OSError (cannot create
the bundle), DocumentsNotWritten (captured and analysed, but findings.json/report.md could not
be written: the Report rides on the exception),
CaptureAborted (a third signal while finishing; the bundle's path is already printed).
"""
from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from diagnose.bundle import FINDINGS, REPORT, Bundle, write_private_bytes
from diagnose.model import Report
from diagnose.render import render

if TYPE_CHECKING:
    from diagnose.capture.ahead import ParseAhead
    from diagnose.capture.session import Capture, CaptureResult
    from diagnose.capture.stop import StopSignals
    from diagnose.collectors import CaptureOptions
    from diagnose.ranks.fanout import Fanout

# The bundle's generated files and the renderer that writes each.
DOCUMENTS: tuple[tuple[str, str], ...] = ((FINDINGS, "json"), (REPORT, "md"))


class DocumentsNotWritten(OSError):
    """The analysis is done but its documents could not be written into the bundle."""

    def __init__(self, report: Report, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.report = report


def analyse(bundle: Bundle | Path, overrides: dict[str, float] | None = None,
            fanout: Fanout | None = None) -> Report:
    """Analyse a bundle (complete or partial; a path is opened first) with ``overrides``
    (``--thresholds``: rule thresholds and analysis parameters). ``fanout``: where the per-trace
    (per-rank) analyses run (diagnose/ranks/fanout.py; default: this process). Raises
    BundleError, ThresholdError, SchedulerError (a Dask ``fanout`` that cannot be used)."""
    from diagnose.ranks.fanout import SERIAL, using
    from diagnose.verdict.analyze import analyze

    b = bundle if isinstance(bundle, Bundle) else Bundle.open(Path(bundle))
    with using(fanout or SERIAL), _fewer_collections():
        return Report(b, analyze(b, overrides), dict(overrides or {}))


# The analysis allocates millions of small objects and frees nearly all of them by reference counting
# (a 30 s bundle leaves ~200 in cycles): with the default first-generation threshold (700) the cyclic
# collector ran thousands of times and took ~25% of its CPU time. Its findings do not depend on when
# garbage is collected.
ANALYSIS_GC_THRESHOLD = 100_000


_gc_lock = threading.Lock()
_gc_saved: list[tuple[int, ...]] = []  # the threshold to restore, while analyses run (one per analysis)


@contextmanager
def _fewer_collections() -> Iterator[None]:
    with _gc_lock:  # analyses in several threads: the first raises it, the last restores it
        _gc_saved.append(gc.get_threshold() if not _gc_saved else _gc_saved[0])
        first = _gc_saved[0]
        gc.set_threshold(max(first[0], ANALYSIS_GC_THRESHOLD), *first[1:])
    try:
        yield
    finally:
        with _gc_lock:
            _gc_saved.pop()
            if not _gc_saved:
                gc.set_threshold(*first)


def documents(report: Report) -> dict[str, str | bytes]:
    """The bundle's generated files, rendered: {findings.json: ..., report.md: ...}."""
    return {name: render(report, fmt) for name, fmt in DOCUMENTS}


def write_documents(report: Report, identity: tuple[int, int] | None = None) -> tuple[Path, ...]:
    """Write findings.json and report.md into the bundle (0600, atomically, through a descriptor on
    its directory: files.open_dir). ``identity`` (st_dev, st_ino of the directory the capture wrote):
    the path must still name it, else nothing is written (another user swapped it). Raises
    DocumentsNotWritten (the Report is on it) when the bundle cannot be written."""
    import errno

    from diagnose.bundle.files import open_dir

    written = []
    try:
        fd = open_dir(report.bundle.path)
        try:
            st = os.fstat(fd)
            if identity is not None and (st.st_dev, st.st_ino) != identity:
                raise OSError(errno.EXDEV, f"{report.bundle.path} is no longer the directory this capture wrote "
                                           f"(replaced by uid {st.st_uid} during the capture); nothing written there")
            for name, body in documents(report).items():
                write_private_bytes(name, _encoded(body), fd)
                written.append(report.bundle.path / name)
        finally:
            os.close(fd)
    except OSError as exc:
        raise DocumentsNotWritten(report, exc) from exc
    return tuple(written)


def _encoded(body: str | bytes) -> bytes:
    # undecodable bytes from the target (argv, paths) arrive as surrogates: escaped, never fatal
    return body.encode("utf-8", errors="backslashreplace") if isinstance(body, str) else body


def analyse_and_write(bundle: Bundle | Path, overrides: dict[str, float] | None = None) -> Report:
    """``analyse`` then ``write_documents``: what the end of every capture does."""
    report = analyse(bundle, overrides)
    write_documents(report)
    return report


Finish = Callable[["CaptureResult"], Report]


class CaptureView(Protocol):
    """How a capture is shown while it runs (diagnose/tui/runner.py picks one): it runs
    ``capture`` until it ends and may call ``finish`` itself (the live TUI does, to show the
    results); it returns the result and the Report when it made one."""

    def run(self, capture: Capture, stop: threading.Event, finish: Finish) -> tuple[CaptureResult, Report | None]:
        ...


@dataclass(frozen=True)
class AttachRequest:
    """What to capture and how: the target pid, collector options, where the bundle goes, the
    command line recorded in the manifest, and the ``--thresholds`` overrides."""

    pid: int
    options: CaptureOptions
    out_dir: Path
    command: tuple[str, ...] = ()
    overrides: dict[str, float] = field(default_factory=dict)
    # called once, as soon as the capture's collection has ended (before the analysis): `diagnose demo`
    # stops its load generator and service there, so they never compete with the analysis for cores
    on_captured: Callable[[], None] | None = None


@dataclass(frozen=True)
class Attached:
    """A finished attach: the capture's result and its Report (documents written)."""

    capture: CaptureResult
    report: Report
    # CPU time (s) of the analysis and its documents after the capture, in the thread that made them
    analysis_cpu_s: float | None = None


def attach(request: AttachRequest, view: CaptureView, signals: StopSignals | None = None) -> Attached:
    """Capture ``request.pid`` through ``view``, analyse the bundle once with the request's
    overrides and write its documents. Raises TargetError, OSError (bundle not created),
    DocumentsNotWritten, CaptureAborted (a third signal: diagnose.capture.stop).

    ``signals``: the caller's signal policy, installed as early as it could and kept until it printed
    the report's line (the CLI); without one, attach installs its own for its duration.
    Ctrl-C/SIGTERM/SIGHUP end the capture early, never the analysis (unless a third aborts)."""
    from diagnose.capture.stop import StopSignals

    if signals is None:
        with StopSignals() as own:
            return _attach(request, view, own)
    return _attach(request, view, signals)


def _import_analysis(lowered: list[int]) -> None:
    """Import the analysis and the renderers (numpy, msgspec, the signal sources, the rules: ~0.3 s
    of CPU with bytecode on this 2-core VM, most of the time to verdict of a capture that did not
    pre-import them). Not named ``diagnose-*``: the overhead budget meters the collector threads only.

    As root, at nice 19 like the samplers (a saturated target keeps its cores; ``lowered`` gets the
    thread id, and the analysis gives it nice 0 back before it imports anything itself). Not as
    another user: nice 19 cannot be undone there, and the analysis would wait on the import lock of a
    thread starved by the target."""
    if os.geteuid() == 0:
        from diagnose.collectors.priority import NICE_19, lower_this_thread

        if lower_this_thread(record=False) == NICE_19:
            lowered.append(threading.get_native_id())
    import diagnose.account  # noqa: F401
    import diagnose.render.markdown  # noqa: F401
    import diagnose.verdict.analyze  # noqa: F401


def _attach(request: AttachRequest, view: CaptureView, signals: StopSignals) -> Attached:
    from diagnose.capture.ahead import ParseAhead
    from diagnose.capture.attach_lock import AttachLock
    from diagnose.capture.session import Capture
    from diagnose.capture.target import resolve_target
    from diagnose.collectors.priority import restore

    target = resolve_target(request.pid)
    finished: list[Report] = []
    spent: list[float] = []  # the analysis' CPU time
    not_written: list[DocumentsNotWritten] = []

    def captured() -> None:
        if request.on_captured is not None and not called:
            called.append(True)
            request.on_captured()

    called: list[bool] = []

    def finish(result: CaptureResult) -> Report:  # once, whoever asks first (view or here)
        captured()
        if not finished:
            if warm.is_alive():  # the imports get a core now: the analysis needs them (a thread id
                for tid in lowered:  # is only ever given back while its thread runs: ids are reused)
                    restore(tid)
            source = result.source()
            if source != result.bundle_path:
                import sys

                real = os.path.realpath(source)
                sys.stderr.write(f"diagnose: warning: {result.bundle_path} no longer names the bundle directory "
                                 f"(a component of --out was swapped during the capture); it is now at {real} "
                                 "and is analysed there\n")
            cpu0 = time.thread_time()
            finished.append(_timed(analyse(_opened(source, ahead), request.overrides)))
            try:
                write_documents(finished[0], result.bundle_identity)
            except DocumentsNotWritten as exc:
                not_written.append(exc)
                raise
            spent.append(time.thread_time() - cpu0)
        elif not_written:
            raise not_written[0]
        return finished[0]

    os.umask(0o077)  # every file the capture (and py-spy) writes is private to the user
    lowered: list[int] = []
    warm = threading.Thread(target=_import_analysis, args=(lowered,), name="analysis-imports", daemon=True)
    warm.start()  # while the capture runs: the verdict after its end does not wait for them
    ahead = ParseAhead(request.overrides)  # windows and traces parsed as they arrive (capture/ahead.py)
    try:
        with AttachLock(request.pid):
            capture = Capture(target, request.options, request.out_dir, list(request.command), ahead=ahead)
            signals.bundle = lambda: capture.bundle_path
            try:
                result, _ = view.run(capture, signals.stop, finish)
            finally:
                captured()
        # Still under the stop handlers: a signal now warns, a second one aborts (naming the bundle).
        # The view's Report, or made now; raises if it cannot be written.
        signals.finishing = True
        try:
            report = finish(result)
            return Attached(result, report, spent[0] if spent else None)
        finally:
            result.close()
    finally:
        ahead.close()


def _timed(report: Report) -> Report:
    """``report`` with the seconds from the capture's end (manifest ``ended_ns``, Unix ns) to now: the
    time to verdict the report states (issue 24: <= 1 s after a 30 s capture)."""
    ended = report.bundle.info.ended_ns
    if ended is None:
        return report
    return replace(report, verdict_after_s=max(0.0, (time.time_ns() - ended) / 1e9))


def _opened(source: Path, ahead: ParseAhead) -> Bundle:
    """The bundle at ``source`` with what was parsed of it during the capture (used where its file is
    unchanged: the findings are those of ``diagnose analyze``). Raises BundleError."""
    bundle = Bundle.open(source)
    bundle.ahead = ahead.finish()
    return bundle


__all__ = ["AttachRequest", "Attached", "CaptureView", "DOCUMENTS", "DocumentsNotWritten", "Report",
           "analyse", "analyse_and_write", "attach", "documents", "write_documents"]

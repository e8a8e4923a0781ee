"""The live view's analysis of the partial bundle, in a child process at low CPU priority.

``analyze`` is pure Python and loads py-spy windows and torch traces with JSON parsers that hold
the GIL for a whole file. Run in the capturing process it would stall the collector threads (the
process collector's 10 Hz ticks); run in a child at nice +10 it cannot touch the capture's GIL,
and the OS gives the capture and the target the cores first.

Protocol (one child per capture, ``python -m diagnose.tui.live.background_analysis``): the parent
writes one JSON line ``{"path": bundle path, "overrides": {--thresholds}}`` to the child's stdin
and the child runs the pipeline's ``analyse`` with them; it answers on stdout with an 8-byte big-endian
length and a pickle of ``("ok", Analysis, ManifestInfo)`` or ``("error", message, is_bundle_error)``.
EOF on stdin ends the child. Pickle is safe here: both ends are this package, over a private pipe.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import subprocess
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnose.bundle.records.manifest import ManifestInfo

NICE = 10
STOP_TIMEOUT_S = 5.0
_LEN = 8


class AnalysisFailed(Exception):
    """The child could not analyse the bundle; ``bundle_error``: it was not (yet) a bundle."""

    def __init__(self, message: str, bundle_error: bool = False):
        super().__init__(message)
        self.bundle_error = bundle_error


class BackgroundAnalyser:
    """Parent side. ``request`` and ``poll`` never block on the analysis; one thread at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self.pending = False

    def start(self) -> None:
        """Spawn the child (imports take ~1 s of its own CPU, paid while the capture starts)."""
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "diagnose.tui.live.background_analysis"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # DEVNULL: Textual owns stderr
            from diagnose.capture.cost import own_child

            own_child(self._proc.pid)  # it outlives the capture: its CPU so far goes in the capture's cost

    def request(self, path: Path, overrides: dict[str, float] | None = None) -> None:
        """Ask for an analysis of ``path`` with ``overrides``. Raises AnalysisFailed when the
        child is gone."""
        self.start()
        _, stdin, _ = self._pipes()
        line = json.dumps({"path": str(path), "overrides": dict(overrides or {})})
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise AnalysisFailed(f"analysis process ended ({exc})") from None
        self.pending = True

    def poll(self) -> tuple[Any, ManifestInfo] | None:
        """The answer to the last request if it is ready, else None.

        Raises AnalysisFailed (the child's error, or the child ended)."""
        if not self.pending:
            return None
        proc, _, stdout = self._pipes()
        if not select.select([stdout], [], [], 0)[0]:
            return None
        head = stdout.read(_LEN)
        body = stdout.read(int.from_bytes(head, "big")) if len(head) == _LEN else b""
        self.pending = False
        if not body:
            raise AnalysisFailed(f"analysis process ended (exit code {proc.poll()})")
        status, first, second = pickle.loads(body)
        if status != "ok":
            raise AnalysisFailed(first, bool(second))
        return first, second

    def _pipes(self) -> tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]:
        """The child and its stdin and stdout. Raises AnalysisFailed once it was closed."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise AnalysisFailed("analysis process closed")
        return proc, proc.stdin, proc.stdout

    def close(self) -> None:
        """End the child (idempotent)."""
        proc, self._proc = self._proc, None
        self.pending = False
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(STOP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _answer(line: str) -> tuple[str, Any, Any]:
    from diagnose.bundle import BundleError
    from diagnose.pipeline import analyse

    try:
        ask = json.loads(line)
        report = analyse(Path(ask["path"]), ask["overrides"])
        return "ok", report.analysis, report.bundle.info
    except BundleError as exc:
        return "error", str(exc), True
    except Exception as exc:  # any failure is the parent's to show; the child keeps serving
        return "error", f"{type(exc).__name__}: {exc}", False


def main() -> None:
    importlib.import_module("diagnose.pipeline")  # import at full priority, then step back

    try:
        os.nice(NICE)
    except OSError:  # not permitted: run at normal priority
        pass
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        data = pickle.dumps(_answer(line.decode().strip()))
        out.write(len(data).to_bytes(_LEN, "big") + data)
        out.flush()


if __name__ == "__main__":
    main()

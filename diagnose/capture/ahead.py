"""Parsing the bundle while the capture writes it, so that its end leaves only the analysis.

A ``ParseAhead`` starts one child process (diagnose/capture/ahead_child.py, nice 19 like the
collector threads) that parses each py-spy window and runs each torch trace's read + analysis
(the picklable trace task) as they arrive, and a thread that receives the results (a few KiB to
a few hundred KiB each: a window's stacks with its frames shared, a trace's report). The child has
its own GIL: the JSON parsers that hold one for a whole file never stall the collector threads.
The receiving thread keeps its normal priority: it only unpickles (~1 ms a window), and the end
of the capture never waits on a thread the host starves.

At the end ``finish()`` hands what arrived to the analysis as a bundle.ahead.Ahead: a value is
used only while its file is unchanged, so the findings equal those of ``diagnose analyze`` on
the bundle; whatever did not arrive (the last window, a trace written at the stop) the analysis
parses itself. A capture stopped by Ctrl-C or by the target's exit ends the same way.

CPU: the child's, while it runs, is read from /proc (``cpu_s``) for the manifest's ``cost``
(``children_cpu_s`` counts only reaped children).
"""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from diagnose.bundle.ahead import Ahead, Parsed
from diagnose.capture.ahead_child import LENGTH_BYTES

STOP_TIMEOUT_S = 2.0
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from diagnose.capture.ahead_child import main; main()"


def _package_root() -> str:
    """The directory holding the ``diagnose`` package this process imported: the child imports the same."""
    import diagnose

    return str(Path(diagnose.__file__).resolve().parent.parent)


class ParseAhead:
    """Parent side, one per capture: ``start(path)`` once the bundle exists, ``finish()`` at its end,
    ``close()`` after the analysis. Never raises: without a child the analysis parses everything."""

    def __init__(self, overrides: dict[str, float] | None = None):
        self._overrides = dict(overrides or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ahead: Ahead | None = None
        self._taking = True
        self.received = 0

    def start(self, path: Path) -> None:
        """Start the child on the bundle at ``path`` (the path the analysis will open)."""
        if self._proc is not None or not sys.executable:  # an embedded interpreter: no child to start
            return
        self._ahead = Ahead(path)
        try:
            self._proc = subprocess.Popen([sys.executable, "-c", _BOOT, _package_root()], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if self._proc.stdin is not None:
                self._proc.stdin.write(json.dumps({"path": str(path), "overrides": self._overrides}).encode() + b"\n")
                self._proc.stdin.flush()
        except OSError:
            self.close()
            return
        self._thread = threading.Thread(target=self._receive, args=(self._proc.stdout,),
                                        name="parse-ahead-receiver", daemon=True)
        self._thread.start()

    def _receive(self, stdout: IO[bytes] | None) -> None:
        while stdout is not None:
            try:
                head = stdout.read(LENGTH_BYTES)
                body = stdout.read(int.from_bytes(head, "big")) if len(head) == LENGTH_BYTES else b""
            except (OSError, ValueError):  # closed under it
                return
            if not body:
                return
            try:
                parsed = pickle.loads(body)
            except Exception:  # noqa: BLE001 - a torn message: the analysis parses that file itself
                return
            with self._lock:
                if not self._taking or self._ahead is None:
                    return
                if isinstance(parsed, Parsed):
                    self._ahead.add(parsed)
                    self.received += 1

    def cpu_s(self) -> float:
        """The child's CPU time so far (user + system, s) while it is not reaped (0 after: then
        getrusage's children time holds it). Its pid stays ours until we reap it."""
        import psutil

        proc = self._proc
        if proc is None or proc.returncode is not None:
            return 0.0
        try:
            t = psutil.Process(proc.pid).cpu_times()
        except psutil.Error:
            return 0.0
        return float(t.user + t.system)

    def finish(self) -> Ahead | None:
        """What arrived so far, for the analysis. The child is stopped (what it would still parse, the
        analysis parses at full priority: it never waits on a process the host may starve) and
        later messages are dropped."""
        with self._lock:
            self._taking = False
            ahead = self._ahead
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                proc.kill()  # it holds nothing: its results are in memory or lost
            except OSError:
                pass
        return ahead

    def close(self) -> None:
        """Stop and reap the child, end the receiving thread (idempotent)."""
        self.finish()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.wait()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)  # the child's end closed its pipe: the thread has returned
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


__all__ = ["ParseAhead"]

"""py-spy collector: Python stacks of every thread, sampled from outside the target.

py-spy runs as a child process in non-blocking mode (it never pauses the target; blocking mode
stops every thread on each sample), ``--idle --threads``, writing Chrome trace JSON. py-spy writes
its output only when a recording ends, so the capture is cut into consecutive windows of
``pyspy_window_s``; a crash loses at most one window.

Streams (diagnose/bundle/streams.py): PYSPY_WINDOWS (py-spy's own chrometrace, one file per window,
``ts`` in us from the recording's origin), PYSPY (one record per window: ``spawn_ns``/``exit_ns``
Unix ns around the child, ``origin_ns`` and ``origin_err_ns`` = where ts 0 lies on the Unix clock
and the half-width of the interval it must lie in, py-spy's ``samples``/``errors`` counts),
PYSPY_SOURCES (the source line behind each sampled ``file:line``, read through /proc/<pid>/root so
it also works for containers; the frame catalog matches calls such as ``sock.recv(`` that have no
Python frame).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from diagnose.bundle import BundleWriter, CollectorState, CollectorStatus
from diagnose.bundle.streams import PYSPY, PYSPY_SOURCES, PYSPY_WINDOWS
from diagnose.collectors.base import CaptureOptions, Collector, Probe, target_alive
from diagnose.collectors.priority import lower_this_thread, restore_process
from diagnose.collectors.source_lines import Credentials, read_source
from diagnose.model import Target

ENV_BINARY = "DIAGNOSE_PY_SPY"
_COUNTS = re.compile(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)")
_PROBE_TIMEOUT_S = 15.0
PROBE_ATTEMPTS = 3
MAX_FAILED_WINDOWS = 3  # consecutive windows without output before py-spy is given up
WINDOW_GRACE_S = 5.0  # py-spy counts samples, not seconds: cut a window that overruns by this
UNDERSAMPLED_SHARE = 0.25  # below this share of the requested rate per thread, the status says so
OVERRUN_SLACK_S = 1.0  # a window that sampled this much (or a quarter) longer than asked overran


def find_pyspy(explicit: str | None = None) -> str | None:
    """Locate the py-spy binary: explicit path, $DIAGNOSE_PY_SPY, PATH, then beside sys.executable."""
    override = explicit or os.environ.get(ENV_BINARY)
    if override:
        return override if os.access(override, os.X_OK) else None
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if os.access(beside, os.X_OK) else None


def classify_failure(output: str, target_alive: bool) -> str:
    """Turn py-spy's error output into the precise cause and its fix (one line)."""
    text = output.lower()
    # py-spy wraps a ptrace/proc permission error in "check that the process is running": test
    # for the permission first, or an alive pid 1 reads as "process gone".
    if "permission denied" in text or "operation not permitted" in text or "os error 13" in text:
        return (
            "permission denied: py-spy needs ptrace on the target; run as the target's user with "
            "kernel.yama.ptrace_scope=0, or as root / with CAP_SYS_PTRACE (in containers add "
            "--cap-add SYS_PTRACE)"
        )
    if not target_alive or "no such process" in text or "check that the process is running" in text:
        return "process gone: the target exited before py-spy could read it"
    if "failed to find python version" in text or "failed to find a python interpreter" in text:
        return "not a Python process: py-spy found no Python interpreter in the target"
    if "failed to convert utf8" in text:
        return ("py-spy cannot read the target: its command line or a path is not valid UTF-8 "
                "(a py-spy limitation); process metrics are still captured")
    if "unsupported version" in text or "unknown python version" in text:
        return "unsupported Python version: upgrade py-spy (pip install -U py-spy)"
    first = next((ln.strip() for ln in output.splitlines() if ln.strip().startswith("Error")), "")
    return f"py-spy cannot read the target: {first or output.strip()[:200] or 'no output'}"


def _transient(output: str) -> bool:
    """A non-blocking read can catch the target mid-update of its frame list: retry those."""
    return "failed to get stack traces" in output.lower() or "failed to copy" in output.lower()


def _pyspy_env() -> dict[str, str]:
    env = dict(os.environ)
    env["RUST_BACKTRACE"] = "0"
    return env


class PySpyCollector(Collector):
    name = "pyspy"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None
        self._rate_hz: int | None = None  # the overhead budget's rate, taken at the next window
        self._cpu_done = 0.0  # CPU s of the windows ended (getrusage of the reaped children)
        self._cpu_lock = threading.Lock()
        self._child_lock = threading.Lock()
        self._samples = 0
        self._errors = 0
        self._windows = 0
        self._rates: list[tuple[float, float, int]] = []  # per window: (achieved Hz per thread, asked Hz, threads)
        self._overran: list[str] = []  # "window N sampled X s for Y s"
        self._failure: str | None = None
        self._binary: str | None = None
        self._seen_lines: set[tuple[str, int]] = set()
        self._file_cache: dict[str, list[str] | None] = {}
        self._creds: Credentials | None = None

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        self._binary = find_pyspy(options.pyspy_path)
        if self._binary is None:
            where = options.pyspy_path or os.environ.get(ENV_BINARY)
            hint = f" ({where} is not executable)" if where else ""
            return Probe(False, f"py-spy not found{hint}: pip install py-spy")
        for _attempt in range(PROBE_ATTEMPTS):
            try:
                res = subprocess.run(
                    [self._binary, "dump", "--pid", str(target.pid), "--nonblocking"],
                    capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, env=_pyspy_env(),
                    start_new_session=True,  # a terminal Ctrl-C is diagnose's to handle
                )
            except subprocess.TimeoutExpired:
                return Probe(False, f"py-spy dump did not answer within {_PROBE_TIMEOUT_S:.0f} s")
            except OSError as exc:
                return Probe(False, f"cannot run {self._binary}: {exc}")
            if res.returncode == 0:
                return Probe(True)
            output = res.stderr + res.stdout
            if not _transient(output):
                break
        return Probe(False, classify_failure(output, target_alive(target)))

    def start(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self._target, self._options, self._bundle = target, options, bundle
        bundle.file_path(PYSPY_WINDOWS.directory).mkdir(mode=0o700, exist_ok=True)
        self._index = bundle.stream(PYSPY.name)
        self._sources = bundle.stream(PYSPY_SOURCES.name)
        self._deadline = time.monotonic() + options.duration_s
        self._thread = threading.Thread(target=self._loop, name="diagnose-pyspy", daemon=True)
        self._thread.start()

    def counts(self) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": self._samples, "errors": self._errors, "windows": self._windows}
        if self._rates:
            out["threads_max"] = max(n for _, _, n in self._rates)
            out["achieved_hz_per_thread_min"] = round(min(a for a, _, _ in self._rates), 2)
            out["windows_overran"] = len(self._overran)
        return out

    def adjust(self, rates: Any) -> None:
        self._rate_hz = int(rates.pyspy_hz)

    def child_cpu_s(self) -> float:
        """CPU of every py-spy window so far: the ended ones exactly (RUSAGE_CHILDREN across each
        window's wait), plus the running one's as psutil reads it."""
        import psutil

        with self._cpu_lock:
            done, child = self._cpu_done, self._child
        if child is None or child.returncode is not None:
            return done
        try:
            t = psutil.Process(child.pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return done  # ending: counted in _cpu_done once reaped
        return done + float(t.user + t.system)

    def _command(self, out: Path, window_s: float) -> list[str]:
        o = self._options
        cmd = [
            self._binary or "py-spy", "record", "--pid", str(self._target.pid),
            "--rate", str(self._rate_hz or o.rate_hz), "--duration", str(_asked_s(window_s)),
            "--idle", "--threads", "--format", "chrometrace", "-o", str(out),
        ]
        # py-spy cannot unwind native stacks without pausing the thread: --native trades the
        # non-blocking guarantee for C/C++ frames, and the manifest says so.
        cmd.append("--native" if o.native else "--nonblocking")
        if o.subprocesses:
            cmd.append("--subprocesses")
        return cmd

    def _loop(self) -> None:
        lower_this_thread()  # and every py-spy child it starts, which inherit it (collectors/priority.py)
        failed = 0
        try:
            while not self._stop.is_set() and self._failure is None:
                remaining = self._deadline - time.monotonic()
                if remaining < 0.5 or not target_alive(self._target):
                    break
                error = self._record_window(min(self._options.pyspy_window_s, remaining))
                failed = failed + 1 if error else 0
                if failed >= MAX_FAILED_WINDOWS:
                    self._failure = error
        except Exception as exc:  # never let the sampling thread die silently: say why it stopped
            self._failure = f"py-spy collector stopped: {type(exc).__name__}: {exc}"

    def _record_window(self, window_s: float) -> str | None:
        """Record one window; return the failure reason if it produced no output."""
        self._windows += 1
        rel = PYSPY_WINDOWS.file(self._windows)
        out = self._bundle.file_path(rel)
        spawn_ns = time.time_ns()
        reaped0 = _reaped_cpu_s()
        try:
            with self._child_lock:
                child = self._child = subprocess.Popen(
                    self._command(out, window_s),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    start_new_session=True,  # a terminal Ctrl-C must not kill it before it writes
                    env=_pyspy_env(),
                )
            output = self._wait_child(child, window_s)
        except OSError as exc:
            self._failure = f"cannot run py-spy: {exc}"
            return self._failure
        with self._cpu_lock:  # the window's CPU, exactly, for the overhead budget
            self._cpu_done += max(0.0, _reaped_cpu_s() - reaped0)
        exit_ns = time.time_ns()
        rc = child.returncode
        m = _COUNTS.search(output or "")
        samples, errors = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        self._samples += samples
        self._errors += errors
        if not out.is_file():
            self._windows -= 1
            if target_alive(self._target) and not self._stop.is_set():
                return classify_failure(output or "", True)
            return None
        os.chmod(out, 0o600)
        first_ts_us, last_ts_us, threads = self._scan_window(out)
        # ts 0 lies between the spawn and (exit - recorded span); take the middle of that interval.
        hi = max(spawn_ns, exit_ns - int(last_ts_us * 1000))
        rate_hz = self._rate_hz or self._options.rate_hz
        self._index.write({
            "window": self._windows, "file": rel, "spawn_ns": spawn_ns, "exit_ns": exit_ns,
            "origin_ns": (spawn_ns + hi) // 2, "origin_err_ns": (hi - spawn_ns) // 2,
            "first_ts_us": first_ts_us, "last_ts_us": last_ts_us, "samples": samples, "errors": errors,
            "returncode": rc, "rate_hz": rate_hz, "window_s": _asked_s(window_s), "threads": threads,
            "ended_by": _ended_by(output or ""), "blocking": self._options.native,
        })
        self._note_rate(rate_hz, samples, threads, (last_ts_us - first_ts_us) / 1e6, _asked_s(window_s))
        return None

    def _note_rate(self, rate_hz: float, samples: int, threads: int, sampled_s: float, asked_s: int) -> None:
        """py-spy reads every thread in each round and counts samples per thread-stack: with many
        threads or a saturated host its rounds take longer than the period asked for."""
        if threads > 0 and sampled_s > 0:
            self._rates.append((samples / threads / sampled_s, float(rate_hz), threads))
        if sampled_s > asked_s + max(OVERRUN_SLACK_S, 0.25 * asked_s):
            self._overran.append(f"window {self._windows} sampled {sampled_s:.1f} s for {asked_s} s")

    def _wait_child(self, child: subprocess.Popen[str], window_s: float) -> str:
        """Wait for the window's py-spy; one that overruns (it counts samples, not seconds, and
        falls behind on targets with many threads) is told to stop and write what it has."""
        try:
            output, _ = child.communicate(timeout=window_s + WINDOW_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGINT)
            try:
                output, _ = child.communicate(timeout=WINDOW_GRACE_S * 2)
            except subprocess.TimeoutExpired:
                child.kill()
                output, _ = child.communicate()
        return output or ""

    def _scan_window(self, path: Path) -> tuple[float, float, int]:
        """Record new source lines of this window; return its first and last ts (us) and the
        number of threads (pid, tid) it sampled."""
        try:
            events = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            return 0.0, 0.0, 0
        first, last = float("inf"), 0.0
        threads: set[tuple[Any, Any]] = set()
        for ev in events if isinstance(events, list) else []:
            ts = float(ev.get("ts", 0))
            first, last = min(first, ts), max(last, ts)
            threads.add((ev.get("pid"), ev.get("tid")))
            args = ev.get("args") or {}
            key = (args.get("filename") or "", int(args.get("line") or 0))
            if key[0] and key[1] > 0 and key not in self._seen_lines:
                self._seen_lines.add(key)
                text = self._source_line(*key)
                if text is not None:
                    self._sources.write({"file": key[0], "line": key[1], "text": text})
        return (first if first <= last else 0.0), last, len(threads)

    def _source_line(self, filename: str, line: int) -> str | None:
        if filename not in self._file_cache:
            if self._creds is None:
                self._creds = Credentials.of(self._target.pid)
            self._file_cache[filename] = read_source(self._target.pid, filename, self._creds)
        lines = self._file_cache[filename]
        if lines is None or line > len(lines):
            return None
        return lines[line - 1].strip()[:200]

    def stop(self, timeout_s: float) -> CollectorStatus:
        self._stop.set()
        with self._child_lock:
            child = self._child
        if child is not None and child.poll() is None:
            restore_process(child.pid)  # it writes its window now, on a core (collectors/priority.py)
            try:  # SIGINT makes py-spy stop sampling and write what it has
                os.killpg(child.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive() and child is not None:
                child.kill()
                self._thread.join(2.0)
        return self._status()

    def _status(self) -> CollectorStatus:
        streams = [s.name for s in (PYSPY, PYSPY_SOURCES, PYSPY_WINDOWS)]
        counts = self.counts()
        if self._failure and self._samples == 0:
            return CollectorStatus(self.name, CollectorState.FAILED, self._failure, counts, streams)
        if self._failure:
            return CollectorStatus(self.name, CollectorState.PARTIAL, self._failure, counts, streams)
        if self._samples == 0:
            return CollectorStatus(
                self.name, CollectorState.FAILED, "py-spy recorded no samples", counts, streams
            )
        notes = ["blocking mode (--native): the target paused at each sample"] if self._options.native else []
        notes += self._rate_notes()
        return CollectorStatus(self.name, CollectorState.OK, "; ".join(notes) or None, counts, streams)

    def _rate_notes(self) -> list[str]:
        """What the manifest says about the sampling py-spy achieved (the analysis says more)."""
        out = []
        requested = float(self._options.rate_hz)
        low = [(a, asked, n) for a, asked, n in self._rates if a < UNDERSAMPLED_SHARE * requested]
        if low:
            a, asked, n = min(low)
            lowered = f", {asked:g} Hz asked by the overhead budget" if asked < requested else ""
            out.append(f"undersampled: each thread sampled at {a:.1f} Hz of the {requested:g} Hz requested "
                       f"({n} threads per round{lowered}) in {len(low)} of {len(self._rates)} window(s)")
        if self._overran:
            out.append("windows overran (py-spy counts samples, not seconds): " + ", ".join(self._overran[:3]))
        return out


def _reaped_cpu_s() -> float:
    """CPU s of this process' reaped children (a py-spy window's, once it ended)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _asked_s(window_s: float) -> int:
    """The ``--duration`` py-spy is given for a window (whole seconds, at least 1)."""
    return max(1, math.ceil(window_s))


def _ended_by(output: str) -> str:
    if "process exited" in output:
        return "target exited"
    if "Control-C" in output:
        return "stopped"
    return "duration"

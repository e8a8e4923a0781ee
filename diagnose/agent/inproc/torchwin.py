"""One bounded torch profiler window inside the target, written as the raw Chrome trace.

The Kineto profiler behind ``torch.profiler.profile``, used directly
(``torch.autograd.profiler.profile(use_kineto=True)``): CPU, plus CUDA where torch has it
(``supported_activities`` and ``torch.cuda.is_available``); record_shapes and with_flops on,
with_stack off by default. ``profile_all_threads`` (torch >= 2.7) makes the profiler, started on
the agent's thread, record the serving threads' ops; older torch records only threads that inherit
the profiler state, which the index record says.

Stopping is three steps (quiesce.py says why): the op callback is removed first
(``_toggle_collection_dynamic``: no op is recorded after it), then the stop waits until no other
thread can still be inside an op that began before, and only then torch finalizes and the trace
is exported. Every call into the profiler runs on one long-lived thread (torchthread.py).

Clock: Kineto writes ``baseTimeNanoseconds`` (Unix ns) and event ``ts`` in us from it, so
``epoch_ns = base_time_ns + ts_us * 1000``; ``start_ns``/``end_ns`` are time.time_ns() taken just
after the profiler started and just after it stopped. The agent never imports torch itself: a
target that has not imported torch has no kernel timeline.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from diagnose.agent.inproc.quiesce import Quiet, wait_quiet
from diagnose.bundle.streams import TORCH_TRACES

MAX_WINDOW_S = 60.0
DEFAULT_WINDOW_S = 10.0
YIELD_S = 0.01  # between the profiler's stop and the export
GUARD_PERIOD_S = 0.01  # how often a running window's CPU is checked near its cap (windowplan.cpu_cap_s)
QUIET_REPORT_S = 1.0  # how often a stop still waiting for quiet updates ``waiting_for``
AGENT_THREADS = "diagnose-agent"  # name prefix of the agent's own threads: they run no torch op
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_HEADER_BYTES = 16 * 1024


def torch_unavailable_reason() -> str | None:
    """Why no torch window can run in this process, or None when torch is imported."""
    if "torch" in sys.modules:
        return None
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed in the target's environment: no kernel timeline"
    return "the target has not imported torch: no kernel timeline (the agent does not import it)"


def read_base_time_ns(path: Path) -> int | None:
    """Kineto's ``baseTimeNanoseconds`` from the head of an uncompressed Chrome trace."""
    with open(path, "rb") as fh:
        m = _BASE_TIME.search(fh.read(_HEADER_BYTES))
    return int(m.group(1)) if m else None


class TorchWindow:
    """Start/stop one profiler window; ``stop`` writes one TORCH_TRACES file and its index record."""

    def __init__(self, out_dir: Path, seq: int, record_shapes: bool = True, with_flops: bool = True,
                 with_stack: bool = False):
        self.out_dir = out_dir
        self.rel = TORCH_TRACES.file(seq).removesuffix(".gz")  # raw: compressing would stall the target
        self.opts = {"record_shapes": record_shapes, "with_flops": with_flops, "with_stack": with_stack}
        self.note: str | None = None
        self.waiting_for: tuple[str, ...] = ()  # threads a stop waits for: 'name at file:line'
        self.abandoned = False  # the capture stopped waiting for the stop: finalize, export nothing
        self._prof: Any = None
        self._activities: list[str] = []
        self.start_ns = 0

    def run(self, window_s: float, cpu_cap_s: float, end_early: threading.Event,
            before_pause: Any = None) -> dict[str, Any]:
        """The whole window on the calling thread (the profiler thread, torchthread.py): start,
        record for ``window_s`` (s) or until ``end_early`` is set or the target's process CPU time
        during the window passes ``cpu_cap_s`` (s; checked when it could have, and every
        GUARD_PERIOD_S near it: an idle service that got busy would outgrow the hold budget), then
        ``stop``. Returns the TORCH record with ``cpu_s`` (the target's CPU during the window) and
        ``cut_by_cpu``. Raises RuntimeError when the profiler does not start."""
        self.start()
        cpu0, end, cut = time.process_time(), time.monotonic() + window_s, False
        cpus = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        left_s = cpu_cap_s
        # the process's CPU grows at most ``cpus`` s a second: the guard wakes (taking the GIL) only
        # when the cap could have been reached, and at least every GUARD_PERIOD_S near it
        while not end_early.wait(max(0.0, min(max(GUARD_PERIOD_S, left_s / cpus), end - time.monotonic()))):
            if time.monotonic() >= end:
                break
            left_s = cpu_cap_s - (time.process_time() - cpu0)
            if left_s < 0:
                cut = True
                break
        cpu_s = time.process_time() - cpu0
        return {**self.stop(before_pause), "cpu_s": round(max(0.0, cpu_s), 6), "cut_by_cpu": cut}

    def start(self) -> None:
        """Raises RuntimeError (e.g. another profiler already runs in the target)."""
        torch = sys.modules["torch"]
        from torch.profiler import ProfilerActivity, supported_activities

        cuda = ProfilerActivity.CUDA in supported_activities() and torch.cuda.is_available()
        self._activities = ["cpu", "cuda"] if cuda else ["cpu"]
        # The Kineto profiler that torch.profiler.profile wraps, used directly: the wrapper's first
        # start imports torch._inductor (dynamo, sympy: seconds of imports holding the target's GIL).
        self._prof = torch.autograd.profiler.profile(
            use_kineto=True, use_cpu=True, use_device="cuda" if cuda else None,
            experimental_config=self._experimental_config(torch), **self.opts)
        self._prof.__enter__()
        self.start_ns = time.time_ns()

    def _experimental_config(self, torch: Any) -> Any:
        """profile_all_threads (record the serving threads) and trace_only (no Python event objects
        built at stop), where this torch has them."""
        config = torch._C._profiler._ExperimentalConfig
        for kwargs in ({"profile_all_threads": True, "trace_only": True}, {"profile_all_threads": True}):
            try:
                return config(**kwargs)
            except TypeError:
                continue
        self.note = (f"torch {torch.__version__} cannot profile all threads: only ops of threads "
                     "that inherit the profiler state are recorded")
        return config()

    def stop(self, before_pause: Any = None) -> dict[str, Any]:
        """Pause collection, wait for quiet, stop, yield, export. Returns the TORCH index record
        (``error`` set if export failed). ``before_pause``: called first (the span bridge closes
        the record_function ranges it opened).

        The profiler's stop and the export each hold the target's GIL for a time that grows with
        the recorded events (~10-30 us per event on a CPU build): they run as two separate holds
        with a pause between them so serving threads run in between; each is timed as this
        thread's CPU time (``stop_s``, ``export_s``: the hold) and wall time (``*_wall_s``), and the
        record says how many events the trace holds (``events``)."""
        torch = sys.modules["torch"]
        record: dict[str, Any] = {"file": None, "start_ns": self.start_ns, "end_ns": None,
                                  "base_time_ns": None, "activities": self._activities,
                                  "torch_version": str(torch.__version__), "error": None,
                                  "stop_s": None, "export_s": None, "events": None}
        try:
            record["stopping_ns"] = time.time_ns()  # the profiled window ends here; end_ns after the stop
            if before_pause is not None:
                before_pause()
            quiet = self._pause_and_wait(torch)
            record["quiesce_s"], record["quiesce"] = quiet.waited_s, quiet.cleared
            # a hold is this thread's CPU time in the call (the GIL-held work); the wall time also
            # counts waiting for the GIL behind the target's own Python, which holds nothing of it
            t0, c0 = time.perf_counter(), time.thread_time()
            self._prof.__exit__(None, None, None)
            record["end_ns"] = time.time_ns()
            record["stop_s"], record["stop_wall_s"] = _held(c0), round(time.perf_counter() - t0, 6)
            if self.abandoned:
                raise RuntimeError("the capture stopped waiting for this window: not exported")
            time.sleep(YIELD_S)  # the serving threads take the GIL back before the export holds it again
            t1, c1 = time.perf_counter(), time.thread_time()
            record["base_time_ns"], record["bytes"], record["events"] = self._export()
            record["export_s"], record["export_wall_s"] = _held(c1), round(time.perf_counter() - t1, 6)
            record["file"] = self.rel
        except (RuntimeError, OSError, ValueError) as exc:
            record["end_ns"] = record["end_ns"] or time.time_ns()
            record["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            self._prof = None
        if self.note:
            record["note"] = self.note
        return record

    def _pause_and_wait(self, torch: Any) -> Quiet:
        """Remove the op callback, then wait (unbounded: finalizing earlier could crash the
        target) until no other thread may be inside an op that began before."""
        from torch.profiler import ProfilerActivity

        # CPU with both device kinds: torch warns on stderr when CPU is toggled without them
        kinds = {ProfilerActivity.CPU, *(getattr(ProfilerActivity, k) for k in ("CUDA", "XPU")
                                        if hasattr(ProfilerActivity, k))}
        torch._C._autograd._toggle_collection_dynamic(False, kinds)
        t0 = time.monotonic()
        while True:
            quiet = wait_quiet(QUIET_REPORT_S, exclude=_agent_threads())
            if quiet.ok:
                return Quiet(round(time.monotonic() - t0, 6), (), quiet.cleared)
            self.waiting_for = quiet.left  # read by a capture that stopped waiting for this stop

    def _export(self) -> tuple[int | None, int, int]:
        """Chrome trace -> private temp file -> atomic rename, uncompressed: nothing is parsed,
        compressed or copied inside the target (diagnose's own process may compress it later).
        Returns (base ns, bytes, events: the count of ``"ph"`` keys, one per event)."""
        final = self.out_dir / self.rel
        final.parent.mkdir(mode=0o700, exist_ok=True)
        part = final.with_name(final.name + ".tmp")
        # Kineto writes PATH.tmp and renames it to PATH: both created 0600 first, since it keeps the
        # mode of a file it truncates (a target killed mid-export leaves a private PATH.tmp.tmp,
        # which the host removes from its bundle: collectors/agent_staging.py remove_partial_traces)
        for p in (part, part.with_name(part.name + ".tmp")):
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600))
            os.chmod(p, 0o600)
        try:
            self._prof.export_chrome_trace(str(part))
            # Kineto writes its own temporary file and renames it over ours (mode from the umask):
            # private again before it gets its final name (the directory is 0700 meanwhile)
            fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
            base = read_base_time_ns(part)
            events = count_events(part)
            os.replace(part, final)
        finally:
            part.unlink(missing_ok=True)
            part.with_name(part.name + ".tmp").unlink(missing_ok=True)
        return base, final.stat().st_size, events


def _agent_threads() -> set[int]:
    import threading

    return {t.ident for t in threading.enumerate() if t.name.startswith(AGENT_THREADS) and t.ident}


def _held(cpu0: float) -> float:
    return round(time.thread_time() - cpu0, 6)


def count_events(path: Path) -> int:
    """Events in a Chrome trace file without parsing it: each event object has one ``"ph"`` key."""
    n, tail = 0, b""
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            buf = tail + chunk
            n += buf.count(b'"ph"')
            tail = buf[-3:]  # shorter than the key: a key cut at the edge is counted once, in the next buffer
    return n

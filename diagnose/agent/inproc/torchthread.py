"""One long-lived thread that makes every torch profiler call of the process's life.

Kineto binds its client to one thread, and a profiler started on one thread and stopped on
another crashes the process (pytorch/pytorch#64795; vllm-project/vllm#54322 measured it: start and
stop on different threads segfault). Each capture runs on its own short-lived thread, so the
windows of all captures are handed to this one thread instead: start, stop and export of every
window run here, one job at a time, in order.

A job the caller stops waiting for (``Job.result`` timed out) still runs to its end here: a window's
stop may wait for another thread to leave a torch op (quiesce.py), and it is never abandoned
half-way. Jobs queued behind it wait their turn; ``busy`` says what runs now. After ``os.fork``
the child gets a fresh, idle instance (the parent's thread does not exist there). Standard library
only (runs inside the target).
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

THREAD_NAME = "diagnose-agent-torch"


class JobTimeout(Exception):
    """The job did not finish within the caller's timeout; it goes on on the profiler thread."""


class Job:
    """One call on the profiler thread: ``done`` is set when it returned or raised."""

    def __init__(self, fn: Callable[[], Any], what: str, notify: threading.Event | None = None):
        self.fn, self.what, self.notify = fn, what, notify
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def result(self, timeout_s: float) -> Any:
        """Its return value, or its exception raised here. Raises JobTimeout after ``timeout_s``
        (s); the job still runs to its end."""
        if not self.done.wait(timeout_s):
            raise JobTimeout(f"{self.what} did not finish in {timeout_s:.1f} s")
        if self.error is not None:
            raise self.error
        return self.value


class TorchThread:
    """Threading contract: ``submit`` from any thread; wait on a job from any thread but the
    profiler thread itself."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.busy: str | None = None  # what the profiler thread does now, for a reason line

    @property
    def ident(self) -> int | None:
        return self._thread.ident if self._thread is not None else None

    def submit(self, fn: Callable[[], Any], what: str, notify: threading.Event | None = None) -> Job:
        """Queue ``fn`` for the profiler thread (started on first use); jobs run one at a time, in order.
        ``notify`` is set too when the job is done (the caller waits on one event for several things)."""
        job = Job(fn, what, notify)
        self._ensure_started()
        self._jobs.put(job)
        return job

    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            self.busy = job.what
            try:
                job.value = job.fn()
            except BaseException as exc:  # handed to the caller: this thread must outlive every job
                job.error = exc
            finally:
                self.busy = None
                job.done.set()
                if job.notify is not None:
                    job.notify.set()


THREAD = TorchThread()


def _after_fork_in_child() -> None:
    global THREAD
    THREAD = TorchThread()


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["THREAD", "THREAD_NAME", "Job", "JobTimeout", "TorchThread"]

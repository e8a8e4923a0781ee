"""Where per-rank tasks run: in this process, a local process pool, or a Dask distributed cluster.

``Fanout.map(fn, tasks)`` returns ``[fn(t) for t in tasks]`` in order. ``fn`` must be a module-level
function and tasks and results small picklable values (diagnose sends TraceTasks and gets
TraceOutcomes back: no events travel). The local pool forks its workers while this process has a
single thread and spawns them otherwise (safe beside the TUI's or a capture's threads), at most
``workers`` processes, all gone when the map returns; with one task, or ``workers=1``, tasks run
in this process. A Dask scheduler (``tcp://HOST:PORT``) runs them on its
workers through ``distributed.Client.map``; those workers must import diagnose and see the bundle
at the same path (a shared file system).

The pipeline reads the fan-out of the analysis in progress from ``current()``; ``using(fanout)``
sets it for a block (diagnose.pipeline.analyse does, for its ``fanout`` argument).

Errors: SchedulerError (``distributed`` not installed, the scheduler unreachable or the address
malformed), FanoutError (a worker died): one line naming the cause and the fix.
"""
from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_LOCAL_WORKERS = 8  # each holds one trace's columns (~60-90 bytes per event) at a time
CONNECT_TIMEOUT_S = 10  # a scheduler that does not answer within this is unreachable
SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"


class FanoutError(Exception):
    """The per-rank tasks could not be run: a local worker process died (killed: out of memory?)
    or the Dask cluster lost its workers."""


class SchedulerError(FanoutError):
    """The Dask scheduler cannot be used (package missing, unreachable, bad address)."""


@dataclass(frozen=True)
class Fanout:
    """``scheduler``: a Dask scheduler address (tcp://HOST:PORT), else the local pool of at most
    ``workers`` processes (0: min(CPU count, MAX_LOCAL_WORKERS, tasks); 1: this process)."""

    workers: int = 1
    scheduler: str | None = None

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """``[fn(t) for t in tasks]``, wherever this fan-out runs them. Raises SchedulerError."""
        if self.scheduler:
            return dask_map(self.scheduler, fn, tasks)
        n = self.local_workers(len(tasks))
        if n <= 1:
            return [fn(t) for t in tasks]
        return pool_map(fn, tasks, n)

    def check(self) -> None:
        """Raise SchedulerError now when ``scheduler`` cannot be used (``distributed`` missing, the
        address malformed, nothing listening): before anything is built for the run. No-op
        without a scheduler."""
        if self.scheduler:
            _reachable(self.scheduler)

    def local_workers(self, tasks: int) -> int:
        if self.workers > 0:
            return min(self.workers, tasks)
        return max(1, min(os.cpu_count() or 1, MAX_LOCAL_WORKERS, tasks))


SERIAL = Fanout(workers=1)
LOCAL_POOL = Fanout(workers=0)
_CURRENT: contextvars.ContextVar[Fanout] = contextvars.ContextVar("diagnose_fanout", default=SERIAL)


def current() -> Fanout:
    """The fan-out of the analysis in progress (SERIAL outside ``using``)."""
    return _CURRENT.get()


@contextmanager
def using(fanout: Fanout) -> Iterator[Fanout]:
    token = _CURRENT.set(fanout)
    try:
        yield fanout
    finally:
        _CURRENT.reset(token)


def pool_map(fn: Callable[[T], R], tasks: Sequence[T], workers: int) -> list[R]:
    """``fn`` over ``tasks`` in a local forkserver process pool of ``workers`` processes, in order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork only while this process has one thread (a fork copies no other thread's locks held);
    # else spawn: fresh interpreters, no server process left behind
    ctx = multiprocessing.get_context("fork" if threading.active_count() == 1 else "spawn")
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            return list(pool.map(fn, tasks))
    except BrokenProcessPool:
        raise FanoutError(f"a worker of the local pool ({workers} processes) died before it finished (killed: out of "
                          "memory?); rerun with fewer --workers, or --workers 1 to analyse in this process") from None


def _probe(address: str) -> None:
    """Raise ValueError for an address Dask cannot parse, OSError when nothing listens at a
    tcp:// or tls:// one (a plain TCP connect, CONNECT_TIMEOUT_S at most)."""
    import socket

    from distributed.comm import get_address_host_port, parse_address
    from distributed.comm.registry import backends

    scheme, _ = parse_address(address)
    if scheme not in backends:
        raise ValueError(f"unknown address scheme {scheme!r}")
    if scheme in ("tcp", "tls"):
        host, port = get_address_host_port(address)
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()


def _reachable(address: str) -> None:
    """Raise SchedulerError unless ``distributed`` imports and something listens at ``address``."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise SchedulerError(f"--scheduler {address} needs the distributed package; install it with "
                             "pip install 'diagnose[dask]', or drop --scheduler to use the local pool") from None
    try:
        _probe(address)  # before a Client exists: a failed Client leaves a 20 s close behind
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        _unreachable(address, exc)


def _unreachable(address: str, exc: Exception) -> NoReturn:
    why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
    raise SchedulerError(f"cannot reach the Dask scheduler at {address!r} ({why}); start one "
                         f"(`dask scheduler`) or pass its address as --scheduler tcp://HOST:PORT "
                         f"(or {SCHEDULER_ENV})") from None


def _connect(address: str) -> Any:
    """A distributed.Client on the scheduler at ``address``. Raises SchedulerError."""
    _reachable(address)
    from distributed import Client

    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        _unreachable(address, exc)


def dask_map(address: str, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
    """``fn`` over ``tasks`` on the Dask cluster whose scheduler listens at ``address``, in order.
    Raises SchedulerError when ``distributed`` is missing or the scheduler cannot be reached."""
    client = _connect(address)
    from distributed import KilledWorker

    with client:
        futures: Any = client.map(fn, list(tasks), pure=False)
        try:
            return list(client.gather(futures))
        except (KilledWorker, OSError) as exc:
            raise FanoutError(f"the Dask cluster at {address!r} lost a task ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:120] if str(exc) else ''}); check its workers' logs and "
                              "that they can import diagnose and read the bundle at the same path") from None


__all__ = ["CONNECT_TIMEOUT_S", "Fanout", "LOCAL_POOL", "MAX_LOCAL_WORKERS", "SCHEDULER_ENV", "SERIAL",
           "FanoutError", "SchedulerError", "current", "dask_map", "pool_map", "using"]

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

Every wait on a Dask cluster is bounded: the scheduler must answer a handshake within
CONNECT_TIMEOUT_S (a port that accepts TCP and never answers is unreachable), have a worker
within WORKER_WAIT_S, and the tasks must finish within GATHER_BASE_S + GATHER_PER_TASK_S per task.

Errors: SchedulerError (``distributed`` not installed, the scheduler unreachable, silent or without
workers, the address malformed), FanoutError (a worker died, a task raised on a Dask worker (one
that cannot import diagnose), the tasks ran past their deadline): one line naming the cause and the fix.
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
CONNECT_TIMEOUT_S = 10  # a scheduler that does not answer a handshake within this (s, total) is unreachable
WORKER_WAIT_S = 10  # a scheduler with no worker gets this long (s) for one to join
GATHER_BASE_S = 60  # the tasks on a Dask cluster must finish within this (s)
GATHER_PER_TASK_S = 60  # plus this per task (one trace read and analysed)
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
        address malformed, nothing listening, no answer within CONNECT_TIMEOUT_S, no worker within
        WORKER_WAIT_S): before anything is built for the run. No-op without a scheduler."""
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


def _identity(address: str) -> dict[str, Any]:
    """The scheduler's answer to distributed's ``identity`` RPC, CONNECT_TIMEOUT_S in all (connect
    and answer). Raises TimeoutError (silent), OSError (refused)."""
    import asyncio

    from distributed.core import rpc

    async def ask() -> dict[str, Any]:
        async with rpc(address, timeout=CONNECT_TIMEOUT_S) as scheduler:
            return dict(await scheduler.identity())

    return asyncio.run(asyncio.wait_for(ask(), CONNECT_TIMEOUT_S))


def _reachable(address: str) -> None:
    """Raise SchedulerError unless ``distributed`` imports, a scheduler answers at ``address`` and
    it has a worker (waiting WORKER_WAIT_S at most for one to join)."""
    import time

    try:
        import distributed  # noqa: F401
    except ImportError:
        raise SchedulerError(f"--scheduler {address} needs the distributed package; install it with "
                             "pip install 'diagnose[dask]', or drop --scheduler to use the local pool") from None
    try:
        _probe(address)  # before a Client exists: a failed Client leaves a 20 s close behind
        deadline = time.monotonic() + WORKER_WAIT_S
        while not (_identity(address).get("workers") or {}):
            if time.monotonic() >= deadline:
                raise SchedulerError(f"the Dask scheduler at {address!r} has no worker (none joined within "
                                     f"{WORKER_WAIT_S} s); start workers (`dask worker {address}`) or drop "
                                     "--scheduler to use the local pool")
            time.sleep(0.2)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        _unreachable(address, exc)


def _unreachable(address: str, exc: Exception) -> NoReturn:
    why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
    if isinstance(exc, TimeoutError):
        why = f"no answer within {CONNECT_TIMEOUT_S} s"
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


def gather_deadline_s(tasks: int) -> float:
    """Seconds the ``tasks`` on a Dask cluster get to finish: GATHER_BASE_S + GATHER_PER_TASK_S each."""
    return GATHER_BASE_S + GATHER_PER_TASK_S * tasks


def dask_map(address: str, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
    """``fn`` over ``tasks`` on the Dask cluster whose scheduler listens at ``address``, in order.
    Raises SchedulerError (``distributed`` missing, the scheduler unreachable, silent or without
    workers), FanoutError (a task raised on a worker, a worker was lost, the tasks did not finish
    within ``gather_deadline_s(len(tasks))`` seconds)."""
    import time

    client = _connect(address)
    deadline = gather_deadline_s(len(tasks))
    fix = "check its workers' logs and that they can import diagnose and read the bundle at the same path"
    try:
        futures: Any = client.map(fn, list(tasks), pure=False)
        end = time.monotonic() + deadline
        try:  # each result re-raises what its task raised on the worker
            return [f.result(timeout=max(0.0, end - time.monotonic())) for f in futures]
        except TimeoutError:
            client.cancel(futures)
            raise FanoutError(f"the {len(tasks)} task(s) on the Dask cluster at {address!r} did not finish within "
                              f"{deadline} s ({GATHER_BASE_S} s + {GATHER_PER_TASK_S} s per trace); {fix}, or drop "
                              "--scheduler to use the local pool") from None
    except FanoutError:
        raise
    except Exception as exc:  # whatever a task raised on its worker (any type), KilledWorker, a lost comm
        why = str(exc).splitlines()[0][:120] if str(exc) else ""
        raise FanoutError(f"a task on the Dask cluster at {address!r} failed ({type(exc).__name__}: {why}); "
                          f"{fix}") from None
    finally:
        client.close(timeout=CONNECT_TIMEOUT_S)


__all__ = ["CONNECT_TIMEOUT_S", "GATHER_BASE_S", "GATHER_PER_TASK_S", "LOCAL_POOL", "MAX_LOCAL_WORKERS",
           "SCHEDULER_ENV", "SERIAL", "WORKER_WAIT_S", "Fanout", "FanoutError", "SchedulerError", "current",
           "dask_map", "gather_deadline_s", "pool_map", "using"]

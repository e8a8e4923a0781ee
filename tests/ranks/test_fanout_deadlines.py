"""Every wait on a Dask cluster is bounded and every failure there is one FanoutError (exit 5):
a port that accepts TCP and never answers, a real scheduler with no worker, a task that raises on
its worker (a worker that cannot import diagnose), tasks that run past their deadline."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from diagnose.ranks.fanout import Fanout, FanoutError, SchedulerError, dask_map, gather_deadline_s

distributed = pytest.importorskip("distributed")


def _bounded(fn, limit_s: float) -> BaseException | None:
    """Run ``fn`` in a thread; the exception it raised, failing the test when it has not returned
    within ``limit_s`` (the old code hung forever: the thread is left behind, a daemon)."""
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            box.append(None)
        except BaseException as exc:  # the test inspects it
            box.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert box, f"still waiting after {limit_s} s"
    return box[0]


def test_a_port_that_never_answers_is_unreachable_within_the_connect_timeout(monkeypatch):
    monkeypatch.setattr("diagnose.ranks.fanout.CONNECT_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts TCP, never speaks
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        exc = _bounded(Fanout(scheduler=address).check, 6)
    assert isinstance(exc, SchedulerError) and "no answer within 1 s" in str(exc), exc
    assert "\n" not in str(exc) and time.monotonic() - t0 < 4


def test_a_scheduler_without_workers_is_refused_after_a_short_wait(monkeypatch):
    monkeypatch.setattr("diagnose.ranks.fanout.WORKER_WAIT_S", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as c:
        exc = _bounded(Fanout(scheduler=c.scheduler_address).check, 6)
    assert isinstance(exc, SchedulerError) and "has no worker (none joined within 0.5 s)" in str(exc), exc


def _cannot_import(_: int) -> int:
    raise ModuleNotFoundError("No module named 'diagnose'")  # what a worker without diagnose raises


def _slow(s: float) -> float:
    time.sleep(s)
    return s


@pytest.fixture(scope="module")
def one_worker():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c:
        yield c.scheduler_address


def test_a_task_raising_on_a_worker_is_a_fanout_error(one_worker):
    with pytest.raises(FanoutError, match=r"failed \(ModuleNotFoundError: No module named 'diagnose'\); check its"):
        dask_map(one_worker, _cannot_import, [1, 2])


def test_tasks_past_their_deadline_are_a_fanout_error(one_worker, monkeypatch):
    monkeypatch.setattr("diagnose.ranks.fanout.GATHER_BASE_S", 0)
    monkeypatch.setattr("diagnose.ranks.fanout.GATHER_PER_TASK_S", 0.5)
    assert gather_deadline_s(3) == 1.5
    exc = _bounded(lambda: dask_map(one_worker, _slow, [1.5]), 5)
    assert isinstance(exc, FanoutError) and "did not finish within 0.5 s (0 s + 0.5 s per trace)" in str(exc), exc
    assert dask_map(one_worker, _slow, [0.01, 0.0]) == [0.01, 0.0]

"""Per-rank analyses fanned out: a local process pool and a real Dask LocalCluster give the same
job analysis as this process; a bad --scheduler is one line and exit code 5."""
from __future__ import annotations

import os
import socket

import pytest
from rank_traces import derive_ranks

from diagnose.pipeline import analyse
from diagnose.ranks.fanout import Fanout, SchedulerError
from helpers import run_diagnose
from kineto_helpers import NCCL, load


@pytest.fixture(scope="module")
def rank_bundle(tmp_path_factory):
    from diagnose.bundle.importers import import_files

    d = tmp_path_factory.mktemp("fan")
    paths = derive_ranks(load(NCCL), d, world=4, straggler=2, lag_us=3_000.0)
    (d / "out").mkdir()
    return import_files(paths, d / "out")


def _job(bundle, fanout):
    a = analyse(bundle, None, fanout).analysis
    return a.details.ranks, a.details.torch_traces, a.verdict.headline


@pytest.fixture(scope="module")
def serial(rank_bundle):
    return _job(rank_bundle, Fanout(workers=1))


@pytest.fixture(scope="module")
def pooled(rank_bundle):
    return _job(rank_bundle, Fanout(workers=2))


def test_local_pool_equals_in_process(pooled, serial):
    assert pooled == serial
    assert [s["rank"] for s in serial[0]["stragglers"] if s["straggler"]] == [2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


def test_unreachable_scheduler_is_one_line_and_exit_5(rank_bundle, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("diagnose.ranks.fanout.CONNECT_TIMEOUT_S", 1)
    with pytest.raises(SchedulerError, match="cannot reach the Dask scheduler"):
        analyse(rank_bundle, None, Fanout(scheduler=f"tcp://127.0.0.1:{_closed_port()}"))
    r = run_diagnose("analyze", str(rank_bundle), env={"DASK_SCHEDULER_ADDRESS": "nonsense://x:1"})
    assert r.returncode == 5, r.stderr
    err = [line for line in r.stderr.splitlines() if line]
    assert len(err) == 1 and err[0].startswith("diagnose: error: cannot reach the Dask scheduler")
    assert "--scheduler tcp://HOST:PORT" in err[0]


def test_import_skims_traces_in_a_pool_with_the_same_index(tmp_path):
    import json as _json

    from diagnose.bundle.importers import import_files

    paths = derive_ranks(load(NCCL), tmp_path, world=3, straggler=1, lag_us=1_000.0)
    paths.append(tmp_path / "notes.json")  # not a trace: the same one-line error either way
    paths[-1].write_text('{"a": 1}')
    from diagnose.bundle.importers import ImportFailed

    errors = []
    for workers in (1, 2):
        (tmp_path / f"o{workers}").mkdir()
        with pytest.raises(ImportFailed) as exc:
            import_files(paths, tmp_path / f"o{workers}", workers)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    index = []
    for workers in (1, 2):
        b = import_files(paths[:-1], tmp_path / f"o{workers}", workers)
        index.append([_json.loads(line) for line in (b / "torch.jsonl").read_text().splitlines()])
        manifest = _json.loads((b / "manifest.json").read_text())
        index[-1].append([c.get("counts") for c in manifest["collectors"]])
    assert index[0] == index[1] and len(index[0]) == 4


def _die(_: int) -> int:
    os._exit(3)  # a worker killed mid-task (the OOM killer does the same)


def test_a_dead_worker_is_one_fanout_error():
    from diagnose.ranks.fanout import FanoutError, pool_map

    with pytest.raises(FanoutError, match="died before it finished"):
        pool_map(_die, [1, 2], 2)


# Last in this file: distributed leaves its IO-loop thread running, after which the local pool
# spawns (it forks only in a single-threaded process) and spawning starts multiprocessing's
# resource tracker, a helper process the leftover check would count against the next pool test.
def test_dask_local_cluster_equals_local_pool(rank_bundle, pooled):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c:
        assert _job(rank_bundle, Fanout(scheduler=c.scheduler_address)) == pooled

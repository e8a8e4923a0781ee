"""A Dask cluster whose workers run in another working directory than the client: the tasks name
the bundle by its absolute path, a fan-out that analyses nothing is exit 5 and leaves the bundle's
findings.json/report.md as they were, and an unusable scheduler creates no import bundle."""
from __future__ import annotations

import os
import socket

import pytest
from rank_traces import derive_ranks

from diagnose.pipeline import analyse, write_documents
from diagnose.ranks.fanout import Fanout, FanoutError
from helpers import run_diagnose
from kineto_helpers import NCCL, load


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("paths")
    (d / "traces").mkdir()
    return derive_ranks(load(NCCL), d / "traces", world=3, straggler=1, lag_us=3_000.0)


@pytest.fixture(scope="module")
def cluster():
    """One worker process, started in this directory (its cwd stays here when the test moves)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  protocol="tcp", host="127.0.0.1") as c:
        yield c.scheduler_address


def test_a_relative_bundle_path_reaches_workers_in_another_cwd(traces, cluster, tmp_path, monkeypatch):
    from diagnose.bundle.importers import import_files

    (tmp_path / "out").mkdir()
    bundle = import_files(list(traces), tmp_path / "out")
    elsewhere = tmp_path / "client"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the worker's cwd is not this one
    job = analyse(os.path.relpath(bundle), None, Fanout(scheduler=cluster)).analysis.details.ranks
    assert job is not None and [s["rank"] for s in job["stragglers"] if s["straggler"]] == [1]


def test_every_task_failing_on_the_cluster_is_exit_5_and_keeps_the_report(traces, cluster, tmp_path, monkeypatch):
    from diagnose.bundle.importers import import_files

    (tmp_path / "out").mkdir()
    bundle = import_files(list(traces), tmp_path / "out")
    write_documents(analyse(bundle, None, Fanout(workers=1)))
    before = {n: (bundle / n).read_bytes() for n in ("findings.json", "report.md")}
    for p in (bundle / "torch").iterdir():  # every trace now unreadable
        p.write_bytes(b"\x00not a trace")
    monkeypatch.chdir(tmp_path)
    r = run_diagnose("analyze", os.path.relpath(bundle), "--scheduler", cluster)
    assert r.returncode == 5, (r.stdout, r.stderr)
    err = [line for line in r.stderr.splitlines() if line]
    assert len(err) == 1 and err[0].startswith("diagnose: error: every one of the 3 trace task(s) failed"), err
    assert "drop --scheduler" in err[0]
    assert {n: (bundle / n).read_bytes() for n in before} == before


def test_a_worker_that_cannot_open_the_bundle_is_a_fanout_error():
    from diagnose.signals.timeline import _check_fanout
    from diagnose.signals.trace_tasks import TraceOutcome, TraceTask
    from diagnose.traces.report import TimelineOptions

    task = TraceTask("/srv/b", "torch_traces/rank-0.json.gz", None, TimelineOptions())
    ok = TraceOutcome(None, ("rank-1.json.gz: truncated",))
    lost = TraceOutcome(None, ("/srv/b is not a diagnose bundle (no manifest.json)",), bundle_unreadable=True)
    with pytest.raises(FanoutError, match="cannot open the bundle at /srv/b .*same path"):
        _check_fanout(Fanout(scheduler="tcp://127.0.0.1:1"), [task, task], [ok, lost])
    _check_fanout(Fanout(workers=2), [task, task], [ok, ok])  # a pool reading bad traces: not the fan-out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_leaves_no_import_bundle(traces, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = run_diagnose("analyze", *map(str, traces), "--out", str(out), "--scheduler",
                     f"tcp://127.0.0.1:{_closed_port()}")
    assert r.returncode == 5, r.stderr
    assert "cannot reach the Dask scheduler" in r.stderr
    assert list(out.iterdir()) == []

"""diagnose sweep against the real demo service, the --command driver, and `diagnose plan --sweep`."""
from __future__ import annotations

import json
import math
import os
import shlex
import stat
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from diagnose.capacity.knee import LoadStep, find_knee
from diagnose.capacity.sweep import KIND, Sweep, SweepError, choose_rates, load_sweep, save_sweep
from diagnose.cli import EXIT_USAGE, main
from diagnose.demo.openloop import poisson_schedule, run_open_loop
from helpers import REPO


@pytest.fixture
def demo_url():
    """The demo service on 127.0.0.1 (one BLAS thread, as diagnose demo starts it)."""
    env = {**os.environ, **{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    proc = subprocess.Popen([sys.executable, "-m", "diagnose.demo.service", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("LISTENING "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/predict"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


@pytest.mark.slow  # a live sweep of the demo service, ~14 s: run with -m slow
def test_sweep_finds_the_knee_of_the_demo_service(demo_url, tmp_path):
    # The most it serves (16 connections, far more arrivals than it can take) sets the rates, so the sweep
    # spans its knee on any machine: ~480 QPS on a 2-core VM (P99 flat ~10 ms to ~250 QPS, climbing past 400).
    capacity = run_open_loop(demo_url, 5000, 1.0, warmup_s=0.3, drain_s=0.2).achieved_qps
    assert capacity > 50, capacity
    rates = ",".join(f"{capacity * f:.0f}" for f in (0.2, 0.4, 0.6, 0.8, 1.1, 1.5))
    out = tmp_path / "sweep.json"
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["sweep", demo_url, "--rates", rates, "--step-s", "1.5", "--warmup-s", "0.3",
                                    "--out", str(out), "--format", "json"])
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    steps, knee = doc["steps"], doc["knee"]
    table = "\n".join(f"{s['offered_qps']:g}: {s['achieved_qps']:.0f} QPS, P99 {s['p99_ms']:.1f} ms" for s in steps)
    assert knee["accepted"], f"{knee['reason']}\n{table}"
    k = knee["step"]
    assert 0 < k < len(steps) - 1, table
    # the knee is the last step where P99 was still flat: the steps past it climbed
    assert max(s["p99_ms"] for s in steps[k + 1:]) >= 3 * steps[k]["p99_ms"], table
    assert steps[k]["achieved_qps"] >= 0.9 * steps[k]["offered_qps"], table
    if knee["breakpoint_qps"] is not None:
        assert steps[k]["offered_qps"] <= knee["breakpoint_qps"] <= steps[k + 1]["offered_qps"], table
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and load_sweep(out).knee.step == k
    assert took < 25, took


def test_the_command_driver_and_its_contract(tmp_path):
    # a fake service: P99 5 ms up to 40 QPS, then 2 ms more per QPS; it serves at most 55 QPS
    fake = ("import json, sys; q = float(sys.argv[1]); print('warming up'); "
            "print(json.dumps({'throughput': min(q, 55.0), 'p99_ms': 5 + 2 * max(0.0, q - 40), 'p50_ms': 3}))")
    cmd = f"{shlex.quote(sys.executable)} -c {shlex.quote(fake)} {{qps}}"
    out = tmp_path / "s.json"
    res = CliRunner().invoke(main, ["sweep", "--command", cmd, "--rates", "10,20,30,40,50,60", "--step-s", "1",
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "knee: 40.0 QPS achieved at 40 offered, P99 5.0 ms" in res.stdout
    sweep = load_sweep(out)
    assert sweep.driver == "command" and sweep.steps[3].p50_ms == 3 and sweep.knee.offered_qps == 40


@pytest.mark.parametrize("command, message", [
    ("echo {qps}", 'last stdout line must be JSON {"throughput"'),
    ("echo hello", "must name a program and contain {qps}"),
    ("false {qps}", "exited with code 1"),
    ("/no/such/program {qps}", "not found"),
])
def test_a_command_that_breaks_the_contract_is_one_error_line(command, message):
    res = CliRunner().invoke(main, ["sweep", "--command", command, "--rates", "1,2,3,4", "--step-s", "1"])
    assert res.exit_code == EXIT_USAGE and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--rates", "1,2,3,4"], "give the service's URL"),
    (["http://127.0.0.1:1/", "--command", "x {qps}", "--rates", "1,2,3,4"], "one of the two"),
    (["ftp://host/", "--rates", "1,2,3,4"], "not an http(s) URL"),
    (["http://127.0.0.1:1/"], "give the offered loads"),
    (["http://127.0.0.1:1/", "--rates", "1,2,3"], "at least 4 rates"),
    (["http://127.0.0.1:1/", "--rates", "1,2,x,4"], "not a comma-separated list"),
    (["http://127.0.0.1:1/", "--rates", "1,2,2,4"], "distinct positive"),
    (["http://127.0.0.1:1/", "--from", "10", "--to", "5"], "0 < FROM < TO"),
])
def test_bad_sweep_arguments(args, message):
    res = CliRunner().invoke(main, ["sweep", *args])
    assert res.exit_code == EXIT_USAGE and message in res.stderr, res.output


def test_an_unreachable_url_stops_at_the_first_step():
    res = CliRunner().invoke(main, ["sweep", "http://127.0.0.1:1/predict", "--rates", "5,10,20,40", "--step-s", "0.5",
                                    "--warmup-s", "0"])
    assert res.exit_code == EXIT_USAGE and "no request to http://127.0.0.1:1/predict succeeded" in res.stderr


def test_geometric_rates():
    assert choose_rates(None, 5, 40, 4) == (5.0, 10.0, 20.0, 40.0)
    assert choose_rates("40, 5,10,20", None, None, 6) == (5.0, 10.0, 20.0, 40.0)
    with pytest.raises(SweepError, match="not both"):
        choose_rates("1,2,3,4", 1, 4, 4)


def test_poisson_schedule_offers_the_rate_exactly():
    t = poisson_schedule(200.0, 2.5, seed=1)
    assert len(t) == 500 and (t >= 0).all() and (t < 2.5).all() and (t[1:] >= t[:-1]).all()
    gaps = t[1:] - t[:-1]
    assert math.isclose(gaps.mean(), 1 / 200, rel_tol=0.05) and gaps.std() / gaps.mean() > 0.8  # exponential-like


def _sweep_file(tmp_path, p99: list[float], achieved: list[float] | None = None):
    rates = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    steps = tuple(LoadStep(x, a, y, mean_ms=4.0) for x, a, y in zip(rates, achieved or rates, p99))
    path = tmp_path / "sweep.json"
    save_sweep(path, Sweep("http://svc/predict", "open-loop", 5.0, 1.0, steps, find_knee(steps)))
    return path


def plan_json(*args: str) -> dict:
    res = CliRunner().invoke(main, ["plan", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_plan_takes_one_instances_qps_from_the_sweeps_knee(tmp_path):
    sweep = _sweep_file(tmp_path, [5, 5, 5, 5, 25, 45], achieved=[10, 20, 30, 38, 45, 46])
    p = plan_json("--sweep", str(sweep), "--target-qps", "1000")
    # the knee: 38 QPS achieved at 40 offered; ceil(1000 / 38 x 1.3) = ceil(34.2) = 35 instances
    assert p["per_instance_qps"] == 38.0 and p["instances"] == 35 and p["p99_ms"] == 5
    assert p["in_flight_total"] == pytest.approx(4.0)  # 1000 QPS x 4 ms mean
    assert any("the sweep's knee, 38.0 QPS achieved at 40 offered" in n for n in p["notes"])


def test_plan_with_a_bundle_and_a_sweep_says_which_qps_it_used(tmp_path):
    # this capture measured no request rate: the sweep's knee stands alone
    sweep = _sweep_file(tmp_path, [5, 5, 5, 5, 25, 45])
    p = plan_json(str(REPO / "fixtures" / "cpu" / "service-json"), "--sweep", str(sweep), "--target-qps", "100")
    assert p["per_instance_qps"] == 40.0 and p["instances"] == 4  # ceil(100 / 40 x 1.3) = ceil(3.25)


def test_plan_with_a_sweep_without_a_knee(tmp_path):
    flat = _sweep_file(tmp_path, [5, 5, 5, 5, 5, 5])
    res = CliRunner().invoke(main, ["plan", "--sweep", str(flat), "--target-qps", "100"])
    assert res.exit_code == EXIT_USAGE and "the sweep found no knee (P99 never degraded" in res.stderr
    assert "--slo-p99" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # with an SLO: the highest step whose P99 met it
    p = plan_json("--sweep", str(flat), "--target-qps", "100", "--slo-p99", "10")
    assert p["per_instance_qps"] == 60.0 and p["instances"] == 3  # ceil(100 / 60 x 1.3) = ceil(2.17)
    assert "highest step whose P99 met the SLO" in p["notes"][0]


def test_plan_when_the_knee_is_over_the_slo(tmp_path):
    sweep = _sweep_file(tmp_path, [5, 6, 8, 12, 40, 80])
    p = plan_json("--sweep", str(sweep), "--target-qps", "100", "--slo-p99", "7")
    assert p["per_instance_qps"] == 20.0 and "over the SLO" in p["notes"][0]


@pytest.mark.parametrize("content, message", [
    ("not json", "is not JSON"),
    ('{"kind": "other"}', f"is not a {KIND} v1 file"),
    (json.dumps({"kind": KIND, "version": 1, "steps": [{"offered_qps": "x"}]}), "lacks offered_qps"),
])
def test_plan_refuses_a_bad_sweep_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    res = CliRunner().invoke(main, ["plan", "--sweep", str(path), "--target-qps", "10"])
    assert res.exit_code == EXIT_USAGE and message in res.stderr


def test_plan_needs_a_bundle_or_a_sweep():
    res = CliRunner().invoke(main, ["plan", "--target-qps", "10"])
    assert res.exit_code == EXIT_USAGE and "plan needs a BUNDLE, a --sweep" in res.stderr


def test_a_sweep_of_another_port_than_the_capture_listened_on_is_said(tmp_path):
    """New-user trial: a capture of the llm demo planned with a sweep of the numpy service on :8080
    gave a cost per 1M tokens from two services without a word."""
    from types import SimpleNamespace

    from diagnose.bundle import Bundle, BundleWriter
    from diagnose.capacity.sweep import _other_service

    (tmp_path / "b").mkdir()
    w = BundleWriter(tmp_path / "b")
    for t in (1, 2):
        w.stream("process.jsonl").write({"t_ns": t * 10**9, "tcp": {"listening_ports": [46847], "accepted": 3}})
    w.write_manifest({"schema_version": 1, "collectors": []})
    w.close()
    report = SimpleNamespace(bundle=Bundle.open(tmp_path / "b"))
    steps = (LoadStep(10.0, 10.0, 5.0),)
    other = Sweep("http://127.0.0.1:8080/predict", "open-loop", 5.0, 1.0, steps, find_knee(steps))
    [note] = _other_service(report, other)
    assert "port 8080" in note and "listened on 46847" in note
    same = Sweep("http://127.0.0.1:46847/predict", "open-loop", 5.0, 1.0, steps, other.knee)
    assert _other_service(report, same) == [] and _other_service(None, other) == []


def test_absurd_measured_rates_and_counts_are_refused_not_planned(tmp_path):
    """Break-it review: a sweep step of 1e-320 QPS crashed plan (OverflowError, exit 4), 1e-300 planned
    3e299 instances, a 400-digit --gpus-per-instance crashed it, and 1101 --rates wrote a sweep file
    plan then refused."""
    from diagnose.capacity.knee import Knee

    rates = [k * 1e-320 for k in range(1, 7)]
    steps = tuple(LoadStep(x, x, y, mean_ms=4.0) for x, y in zip(rates, [5, 5, 5, 5, 25, 45]))
    tiny = tmp_path / "tiny.json"
    save_sweep(tiny, Sweep("http://svc/predict", "open-loop", 5.0, 1.0, steps, Knee(False, "written by hand")))
    r = CliRunner().invoke(main, ["plan", "--sweep", str(tiny), "--target-qps", "100", "--slo-p99", "1e12"])
    assert r.exit_code == EXIT_USAGE and "at least 0.001 QPS" in r.output, r.output  # was a crash (exit 4)
    from diagnose.capacity.plan import PlanError, check_measured

    with pytest.raises(PlanError, match="not a rate to plan on"):
        check_measured("QPS", 1e-300, "1/s")  # would plan 3e299 instances
    r = CliRunner().invoke(main, ["plan", str(REPO / "fixtures/cpu/service-json"), "--target-qps", "100",
                                  "--gpus-per-instance", "1" + "0" * 400])
    assert r.exit_code == EXIT_USAGE, r.output
    with pytest.raises(SweepError, match="at most 100"):
        choose_rates(",".join(str(i) for i in range(1, 1102)), None, None, 6)

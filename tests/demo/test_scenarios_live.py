"""Every demo scenario, live and short: the service under the agent, the open-loop load, a 4 s
capture, and the verdict's quadrant and layer the accuracy benchmark expects (benchmarks/accuracy.py).

Fast (in the default suite): ``healthy`` (nothing dominates: the report must say so) and, in
tests/cli/test_cli.py, the default ``service`` scenario. The others run ~20-30 s each on 2 cores and
are marked slow (``-m slow``). On a host whose other processes keep the cores busy the verdict's layer
is the system ("Starved by its host"): that is a right reading of the host, so it is accepted in place
of the scenario's own layer; the quadrant of the target's own work must still be the expected one.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from helpers import REPO, findings, only_bundle, run_diagnose

sys.path.insert(0, str(REPO / "benchmarks"))
from accuracy import EXPECTED  # noqa: E402

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("aiohttp") is None or importlib.util.find_spec("torch")
                                 is None, reason="the demo extra (torch, aiohttp) is not installed"),
              pytest.mark.live]  # verdicts of the live demo: run alone


def _run(scenario: str, out: Path) -> dict:
    res = run_diagnose("demo", "--scenario", scenario, "--duration", "4", "--no-tui", "--out", str(out), timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "client P50" in res.stdout and "diagnose (request spans): P50" in res.stdout
    doc = findings(only_bundle(out))
    doc["_stdout"] = res.stdout
    return doc


def _check(scenario: str, doc: dict) -> None:
    v = doc["verdict"]
    quadrant, layer = EXPECTED[scenario]
    why = json.dumps({"verdict": v, "terms": [(t["kind"], round(t["share"], 2)) for t in doc["account"][0]["terms"]]})
    assert v["quadrant"] == quadrant, why
    starved = "Starved by its host" in v["headline"]
    assert v.get("layer") == layer or (starved and v.get("layer") == "system"), why


def test_healthy_scenario_says_nothing_limits_it(tmp_path):
    doc = _run("healthy", tmp_path)
    _check("healthy", doc)
    assert "nothing limits this service now" in doc["verdict"]["headline"]
    # offered the scenario's load times the capacity measured first (diagnose/demo/runner.py)
    assert "0.02 x the " in doc["_stdout"] and "QPS capacity measured before the capture" in doc["_stdout"]


SLOW = [s for s in EXPECTED if s not in ("healthy", "service")]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SLOW)
def test_scenario_verdict(scenario, tmp_path):
    doc = _run(scenario, tmp_path)
    _check(scenario, doc)
    if scenario == "llm":
        assert doc["signals"]["llm.decode_share_pct"]["value"] > 0
        assert "split at the first token" in doc["verdict"]["headline"]
    if scenario == "io":
        assert doc["details"]["requests"]["stage_share_pct"]["network"] > 50


def test_the_unbatched_remedy_gains_what_its_capture_predicted(tmp_path):
    """The method's loop closed on the demo: the unbatched scenario, then the same load with batching
    on (--remedy); compare --change judges BASE's predicted batching gain against what NEW measured."""
    plain, fixed = tmp_path / "plain", tmp_path / "fixed"
    for out, extra in ((plain, ()), (fixed, ("--remedy",))):
        res = run_diagnose("demo", "--scenario", "unbatched", "--duration", "4", "--no-tui", "--out", str(out),
                           *extra, timeout=180)
        assert res.returncode == 0, res.stderr[-2000:]
    res = run_diagnose("compare", str(only_bundle(plain)), str(only_bundle(fixed)), "--change",
                       "dynamic batching: the worker batches up to 16 queued requests", "--format", "json")
    assert res.returncode == 0, res.stderr[-2000:]
    g = json.loads(res.stdout)["gain_check"]
    assert g["chosen"] == "the remedy the change names" and g["predicted"]["method"] == "batching"
    band = g["predicted"]["throughput_x"]
    assert 1.0 <= band["low"] <= band["high"] and g["metric"] == "throughput"
    # Batching at 32 in flight: more capacity. How much is the host's: 2.0-4.4x where batch 1 was slow
    # (README), 1.13-1.44x on this VM's later CPU (the batched worker still 75-82% busy at the
    # scenario's load), within the comparison's noise (~0.4) in about half the runs: judged either way.
    assert g["measured"] is not None and g["measured"] > 1.1, g
    assert g["outcome"] in ("held", "beat", "fell short", "inconclusive") and g["why"], g


def test_a_remedy_run_is_offered_the_plain_systems_rate(tmp_path):
    """--remedy measures the plain system's capacity, its upstream included: the io remedy's upstream
    answers in 5 ms instead of 15, and the probe once ran against it (~250 QPS offered where the plain
    run got ~58). The plain io service does at most 2 upstream calls at a time of >= 15 ms: < 134/s."""
    res = run_diagnose("demo", "--scenario", "io", "--remedy", "--duration", "2", "--no-tui", "--out", str(tmp_path),
                       timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r"x the ([\d.]+) QPS capacity measured before the capture", res.stdout)
    assert m is not None, res.stdout[-2000:]
    assert 0 < float(m.group(1)) <= 2 / 0.015, m.group(0)

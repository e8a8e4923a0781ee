"""The agent's torch windows, from start to the end of their export, never hold a serving thread
for more than the stated bound (STALL_BUDGET_S, diagnose/agent/inproc/windowplan.py): measured by
the target's own loop (tests/workloads/torch_small_ops.py), on a torch loop of small ops at a few
hundred thousand ops/s and on a request-serving target, both under `diagnose run`."""
from __future__ import annotations

import json
import os
import signal

import pytest

from agent_helpers import read_until, service  # noqa: F401  (fixture)
from diagnose.agent.inproc.windowplan import STALL_BUDGET_S
from helpers import only_bundle, run_diagnose

pytest.importorskip("torch", reason="torch is needed for the profiled targets")
pytestmark = pytest.mark.live  # a stall bound measured on the target's own clock: run alone

# A loaded 2-core CI host adds scheduling delay to any gap the target sees, with or without the
# profiler (measured here: up to ~15 ms while py-spy and the analysis run); the bound is checked
# with that allowance on the target's own clock, and exactly on the agent's measured holds.
SCHEDULING_SLACK_MS = 25.0
# The plan waits 200x the holds so far before the next window (STALL_SHARE 0.5%): a probe holding
# 20-30 ms on a slow CI host puts the second window 4-6 s in, so a 4 s capture recorded only the probe.
CAPTURE_S = "12"


def _capture(service, tmp_path, *target_args: str) -> tuple[list[dict], dict, dict]:  # noqa: F811
    svc = service("--seconds", "40", *target_args, workload="torch_small_ops")
    res = run_diagnose("attach", str(svc.pid), "--duration", CAPTURE_S, "--torch-window", "10", "--out", str(tmp_path),
                       "--no-tui", timeout=150)
    assert res.returncode == 0, res.stderr
    os.kill(svc.pid, signal.SIGTERM)
    read_until(svc.proc, "{", 30, svc.lines)  # its own figures: it ran to its end, alive
    own = json.loads(svc.lines[-1])
    bundle = only_bundle(tmp_path)
    windows = [json.loads(x) for x in (bundle / "torch.jsonl").read_text().splitlines()]
    agent = {c["name"]: c for c in json.loads((bundle / "manifest.json").read_text())["collectors"]}["agent"]
    cost = next(ln for ln in (bundle / "report.md").read_text().splitlines() if ln.startswith("**Cost of this"))
    assert "torch windows" in cost and f"at most {agent['counts']['torch_hold_max_ms']:.1f} ms" in cost, cost
    return windows, own, agent


def _worst_gap_in_holds_ms(windows: list[dict], gaps: list[list[float]]) -> float:
    """The target's longest gap overlapping a window's start or its stop-and-export."""
    spans = [(w["start_ns"] - 5e6, w["start_ns"] + 5e6) for w in windows]
    spans += [(w["stopping_ns"], w["end_ns"] + 2e7 + w["export_s"] * 1e9) for w in windows]
    return max((ms for t, ms in gaps for a, b in spans if t < b and t + ms * 1e6 > a), default=0.0)


def _check(windows, own, agent) -> None:
    assert len(windows) >= 2 and all(w["error"] is None and w["events"] > 0 for w in windows), windows
    holds = [max(w["stop_s"], w["export_s"]) for w in windows]
    # the plan aims at 0.4 x the budget; CPU contention from other processes stretches a hold's wall time
    assert max(holds) <= STALL_BUDGET_S * 1.25, holds
    worst = _worst_gap_in_holds_ms(windows, own["gaps"])
    print(f"\n{own['per_s']:,.0f}/s; {len(windows)} windows, {sum(w['events'] for w in windows)} events; "
          f"holds max {1e3 * max(holds):.1f} ms; target's worst gap in a hold {worst:.1f} ms")
    assert worst <= STALL_BUDGET_S * 1e3 + SCHEDULING_SLACK_MS, (worst, windows)
    assert agent["counts"]["torch_hold_max_ms"] == pytest.approx(1e3 * max(holds), abs=0.2)
    assert agent["counts"]["torch_plan"]


def test_small_ops_loop_is_never_held_past_the_bound(service, tmp_path):  # noqa: F811
    windows, own, agent = _capture(service, tmp_path)
    assert own["per_s"] > 100_000  # ops/s under the capture (unprofiled: ~270k here)
    _check(windows, own, agent)


def test_serving_target_is_never_held_past_the_bound(service, tmp_path):  # noqa: F811
    windows, own, agent = _capture(service, tmp_path, "--serve")
    assert own["per_s"] > 50  # requests/s: it kept serving (~300/s here; 97/s once on a host loaded by other jobs)
    _check(windows, own, agent)

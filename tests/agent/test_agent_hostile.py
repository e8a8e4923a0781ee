"""Hostile in-target agents: one that names someone else's directory as its staging directory (root
must neither read it into the bundle nor delete it: collectors/agent_staging.py), one that floods
sockets named like the agent's and never answers (the probe has one time budget)."""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from helpers import only_bundle, run_diagnose


@pytest.mark.parametrize("mode", ["name", "symlink"])
def test_a_lying_staging_directory_is_neither_read_nor_deleted(mode, workload, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "secret.txt").write_text("root's secret\n")
    (victim / "process.jsonl").write_text('{"spoofed": true}\n')
    runtime = Path(tempfile.mkdtemp(prefix="dg-"))  # short: Unix socket paths are limited
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    proc = workload("hostile_agent", mode, str(victim), env=env)
    out = tmp_path / "out"
    r = run_diagnose("attach", str(proc.pid), "--duration", "2", "--no-tui", "--torch-window", "0",
                     "--skip", "pyspy", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    bundle = only_bundle(out)
    assert (victim / "secret.txt").read_text() == "root's secret\n"  # not deleted
    assert not (bundle / "secret.txt").exists()
    assert "spoofed" not in (bundle / "process.jsonl").read_text()  # not overwritten
    agent = next(c for c in json.loads((bundle / "manifest.json").read_text())["collectors"]
                 if c["name"] == "agent")
    assert agent["state"] == "partial" and "ignored" in agent["reason"], agent
    # the capture ran its full time: "partial" names what was partial, not a capture cut short
    assert "partial capture: duration reached; agent recorded part of what was asked" in r.stderr
    assert "(**partial capture**: agent recorded part of what was asked" in (bundle / "report.md").read_text()
    if mode == "symlink":
        assert os.path.islink(next(runtime.rglob("capture-*")))  # left as the target made it


def test_an_agent_socket_flood_that_never_answers_cannot_stretch_the_capture(workload, tmp_path):
    socks = Path(tempfile.mkdtemp(prefix="dg-"))
    proc = workload("stalling_agent", str(socks), "10")
    t0 = time.monotonic()
    r = run_diagnose("attach", str(proc.pid), "--duration", "2", "--no-tui", "--skip", "pyspy",
                     "--out", str(tmp_path / "out"))
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    # 10 sockets x 2 routes x 3 s used to be 60 s; the probe now has one 3 s budget for all of them
    assert took < 20, f"attach --duration 2 took {took:.1f} s"
    assert "agent: unavailable" in r.stderr and "did not answer" in r.stderr

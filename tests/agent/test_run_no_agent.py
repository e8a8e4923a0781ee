"""`diagnose run --capture` on a command that never starts an agent: one line says so, and it
captures without the agent, or (the command already gone) exits 3 naming the command's own code."""
from __future__ import annotations

from helpers import findings, only_bundle, run_diagnose


def test_a_command_that_exits_at_once_is_said_and_exits_3(tmp_path):
    res = run_diagnose("run", "--capture", "2", "--no-tui", "--out", str(tmp_path), "--",
                       "true", timeout=60)
    assert res.returncode == 3, res.stderr  # README: nothing captured
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("diagnose:")]
    assert len(lines) == 1 and "exited with code 0 before the capture could start" in lines[0], res.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("diagnose-")]


def test_a_non_python_command_is_said_and_captured_without_the_agent(tmp_path):
    res = run_diagnose("run", "--capture", "1", "--no-tui", "--out", str(tmp_path), "--", "sleep", "3",
                       timeout=60)
    assert res.returncode == 0, res.stderr  # the command's: sleep ended well, a report was written
    said = [ln for ln in res.stderr.splitlines() if ln.startswith("diagnose:")]
    assert len(said) == 1 and "not a Python process" in said[0] and "capturing without the agent" in said[0], res.stderr
    assert "report:" in res.stdout
    doc = findings(only_bundle(tmp_path))
    assert {c["name"]: c["state"] for c in doc["collectors"]}["process"] == "ok"

"""The CLI surface: help, analyze, report, doctor, demo, and the live progress line on a TTY."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time

from helpers import REPO, findings, is_report, only_bundle, run_diagnose

FIXTURE = REPO / "fixtures" / "cpu" / "service-json"


def test_help_documents_exit_codes():
    res = run_diagnose("attach", "--help")
    assert res.returncode == 0
    for line in ("0  ok", "1  regression", "2  usage, input or target error", "3  capture failed entirely",
                 "4  internal error"):
        assert line in res.stdout
    for opt in ("--duration", "--out", "--rate", "--native", "--subprocesses", "--no-tui"):
        assert opt in res.stdout


def test_usage_error_exits_2():
    res = run_diagnose("attach", "not-a-pid")
    assert res.returncode == 2


def test_analyze_prints_findings_json_and_rewrites_bundle(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURE, b)
    res = run_diagnose("analyze", str(b), "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"]["quadrant"] == "service"
    assert (b / "findings.json").is_file() and (b / "report.md").is_file()
    text = run_diagnose("analyze", str(b))
    assert "verdict: service" in text.stdout


def test_analyze_thresholds_file(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURE, b)
    bad = tmp_path / "t.json"
    bad.write_text('{"nope:x": 1}')
    res = run_diagnose("analyze", str(b), "--thresholds", str(bad))
    assert res.returncode == 2 and "unknown threshold" in res.stderr


def test_report_renders_without_touching_bundle(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURE, b)
    res = run_diagnose("report", str(b), "-f", "md")
    assert res.returncode == 0 and is_report(res.stdout)
    assert not (b / "report.md").exists()
    res = run_diagnose("report", str(b), "-f", "svg")
    assert res.returncode == 2 and "'svg' is not one of 'md', 'md-full', 'json'" in res.stderr  # the registry
    # one line naming the cause and where to look, not click's Usage / Try / Error (new-user trial)
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("diagnose: Invalid value for '-f'"), res.stderr
    assert "(see `diagnose report --help`)" in res.stderr


def test_doctor_reports_pyspy_and_missing_nvml():
    res = run_diagnose("doctor")
    assert "py-spy" in res.stdout and "NVML" in res.stdout
    assert res.returncode == 0, res.stdout


def test_doctor_checks_a_pid(workload):
    proc = workload("json_loop")
    res = run_diagnose("doctor", "--pid", str(proc.pid))
    assert f"py-spy on pid {proc.pid}: readable" in res.stdout


def test_demo_runs_end_to_end(tmp_path):
    """The default scenario (service), under the agent: every source lands, the verdict is service,
    the client's P50/P99 print beside diagnose's, and no child outlives the capture by 2 s."""
    import psutil

    res = run_diagnose("demo", "--duration", "4", "--out", str(tmp_path), timeout=150)
    assert res.returncode == 0, res.stderr
    assert "client P50" in res.stdout and "diagnose (request spans): P50" in res.stdout
    m = re.search(r"service pid (\d+) on (\S+)", res.stdout)
    stopped = re.search(r"children stopped in ([\d.]+) s", res.stdout)
    assert m and stopped and float(stopped.group(1)) < 2.0, res.stdout
    assert not psutil.pid_exists(int(m.group(1)))
    assert not [p.pid for p in psutil.process_iter(["cmdline"]) if m.group(2) in " ".join(p.info["cmdline"] or [])]
    b = only_bundle(tmp_path)
    doc = findings(b)
    assert doc["verdict"]["quadrant"] == "service"
    md = (b / "report.md").read_text()  # issue 13: the demo's report is a ticket, its title the verdict
    assert is_report(md) and len(md) <= 12_000 and md.startswith("# Service-bound"), (len(md), md[:200])
    ss = run_diagnose("report", str(b), "-f", "speedscope")  # opens on the service's busiest thread
    first = json.loads(ss.stdout)["profiles"][0]["name"]
    assert ss.returncode == 0 and not first.startswith("diagnose-"), first
    dq = doc["data_quality"]
    assert dq["pyspy"]["samples"] > 100 and dq["spans"]["count"] > 20 and dq["torch"]["traces"] >= 1
    assert (b / "gc.jsonl").is_file() and (b / "process.jsonl").is_file() and dq["gpu"]["counters"] == "unavailable"
    stages = doc["details"]["requests"]["stage_share_pct"]
    assert stages["preprocess"] > 0 and stages["postprocess"] > 0 and stages["model"] > 0 and stages["queue"] > 0


def test_live_progress_line_on_a_tty(workload, tmp_path):
    proc = workload("json_loop")
    master, slave = pty.openpty()
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "3", "--out", str(tmp_path)],
        stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "TERM": "xterm"}, close_fds=True,
    )
    os.close(slave)
    screen = b""
    quit_sent = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
            if b"Findings" in screen and not quit_sent:  # the TUI's results view: leave it
                os.write(master, b"q")
                quit_sent = True
        elif diag.poll() is not None:
            break
    diag.wait(30)
    os.close(master)
    text = screen.decode(errors="replace")
    assert diag.returncode == 0, text
    assert "elapsed" in text and "samples" in text
    assert "verdict: service" in text


def test_analysis_output_is_deterministic(tmp_path):
    outputs = set()
    for seed in ("1", "2", "3"):
        b = tmp_path / f"b{seed}"
        shutil.copytree(FIXTURE, b)
        res = run_diagnose("analyze", str(b), "--format", "md", env={"PYTHONHASHSEED": seed})
        assert res.returncode == 0, res.stderr
        outputs.add(res.stdout)
    assert len(outputs) == 1

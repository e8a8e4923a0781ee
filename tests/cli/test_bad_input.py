"""Bad input: each case behaves as documented (exit code, one-line error, nothing lost)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import findings, only_bundle, run_diagnose, wait_for_capture


def error_lines(res) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.strip()]


def test_pid_that_does_not_exist(tmp_path):
    res = run_diagnose("attach", "4194000", "--duration", "2", "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    lines = error_lines(res)
    assert len(lines) == 1 and "no process with pid 4194000" in lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_non_python_pid_still_captures_process_metrics(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        res = run_diagnose("attach", str(sleeper.pid), "--duration", "2", "--out", str(tmp_path))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 0, res.stderr
    doc = findings(only_bundle(tmp_path))
    states = {c["name"]: c for c in doc["collectors"]}
    assert states["pyspy"]["state"] == "unavailable"
    assert states["pyspy"]["reason"].startswith("not a Python process")
    assert states["process"]["state"] == "ok"
    assert doc["signals"]["cpu.process_util_pct"]["value"] is not None
    assert doc["signals"]["cpu.category_share_pct[serialization]"]["value"] is None
    assert "not a Python process" in doc["signals"]["cpu.category_share_pct[serialization]"]["reason"]
    report = (only_bundle(tmp_path) / "report.md").read_text()
    assert "not a Python process" in report


def test_target_exits_halfway(workload, tmp_path):
    proc = workload("short_lived", "60")
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_for_capture(tmp_path, diag)  # exits mid-capture, however long attach took to start
    time.sleep(2)
    proc.terminate()
    _, err = diag.communicate(timeout=90)
    assert diag.returncode == 0, err
    bundle = only_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["partial"] is True
    assert manifest["end_reason"] == "target exited"
    assert (manifest["ended_ns"] - manifest["started_ns"]) / 1e9 < 20  # not the 30 s deadline
    assert (bundle / "report.md").is_file()
    assert "partial capture" in (bundle / "report.md").read_text()
    assert findings(bundle)["signals"]["stacks.sampled_s"]["value"] > 0.5


def test_a_target_that_exits_at_once_gets_no_verdict(workload, tmp_path):
    """A busy target gone a moment into the capture: what was sampled is mostly its exit, so no
    quadrant is named (it read "no load, waited for work 98%" before), and the report says why."""
    proc = workload("short_lived", "60")
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_for_capture(tmp_path, diag)
    proc.terminate()
    _, err = diag.communicate(timeout=90)
    assert diag.returncode == 0, err
    doc = findings(only_bundle(tmp_path))
    alive = doc["signals"]["capture.target_alive_s"]["value"]
    assert alive is not None and alive < 2.0, alive
    assert doc["verdict"]["quadrant"] == "unknown", doc["verdict"]
    assert "secondary.target_exited_early" in {f["rule_id"] for f in doc["findings"]}
    assert "exited" in (only_bundle(tmp_path) / "report.md").read_text().split("\n", 3)[2]


@pytest.mark.parametrize("sig,reason", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_signal_mid_capture_leaves_partial_bundle_and_report(workload, tmp_path, sig, reason):
    proc = workload("json_loop")
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_for_capture(tmp_path, diag)  # py-spy is sampling: not before (CLI start-up varies under load)
    time.sleep(2)  # ~200 samples at 100 Hz
    diag.send_signal(sig)
    out, err = diag.communicate(timeout=60)
    assert diag.returncode == 0, err
    bundle = only_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["partial"] is True and reason in manifest["end_reason"]
    doc = findings(bundle)
    assert doc["verdict"]["quadrant"] == "service"
    assert doc["data_quality"]["pyspy"]["samples"] > 50  # the interrupted window was kept
    assert proc.poll() is None, "the target must survive the interrupted capture"


def test_out_directory_not_writable(workload, tmp_path):
    proc = workload("json_loop")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--out", str(blocker / "sub"))
    assert res.returncode == 2
    lines = error_lines(res)
    assert len(lines) == 1 and "cannot create output directory" in lines[0] and "--out" in lines[0]


def test_pyspy_not_installed(workload, tmp_path):
    proc = workload("json_loop")
    res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--out", str(tmp_path),
                       env={"DIAGNOSE_PY_SPY": str(tmp_path / "no-such-py-spy")})
    assert res.returncode == 0, res.stderr
    doc = findings(only_bundle(tmp_path))
    states = {c["name"]: c for c in doc["collectors"]}
    assert states["pyspy"]["state"] == "unavailable"
    assert "py-spy not found" in states["pyspy"]["reason"] and "pip install py-spy" in states["pyspy"]["reason"]
    assert states["process"]["state"] == "ok"
    assert "py-spy not found" in res.stderr


def test_attaching_twice_to_the_same_pid(workload, tmp_path):
    proc = workload("json_loop")
    first = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "60",
         "--out", str(tmp_path / "first")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "first").exists() or not any((tmp_path / "first").iterdir()):
            assert time.monotonic() < deadline, "first capture never started"
            time.sleep(0.2)
        res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--out", str(tmp_path / "second"))
        assert res.returncode == 2
        lines = error_lines(res)
        assert len(lines) == 1 and "already attached" in lines[0]
    finally:
        first.send_signal(signal.SIGINT)  # proven: no need to sit out the first capture's 60 s
        first.communicate(timeout=60)
    assert first.returncode == 0


def test_nothing_captured_exits_3(tmp_path):
    # py-spy cannot read a non-Python target and the process collector is skipped: nothing at all.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        res = run_diagnose("attach", str(sleeper.pid), "--duration", "2", "--out", str(tmp_path),
                           "--skip", "process")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 3, res.stderr
    bundle = only_bundle(tmp_path)
    assert "skipped (--skip process)" in (bundle / "report.md").read_text()
    assert findings(bundle)["verdict"]["quadrant"] == "unknown"


def test_analyze_rejects_a_directory_that_is_not_a_bundle(tmp_path):
    res = run_diagnose("analyze", str(tmp_path))
    assert res.returncode == 2
    assert "not a diagnose bundle" in res.stderr and len(error_lines(res)) == 1


def test_bundle_of_killed_capture_is_still_analysable(workload, tmp_path):
    proc = workload("json_loop")
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30", "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    wait_for_capture(tmp_path, diag, windows=1)  # past the first py-spy window (5 s + start-up)
    os.killpg(diag.pid, signal.SIGKILL)
    diag.wait()
    bundle = only_bundle(tmp_path)
    assert not (bundle / "findings.json").exists()
    res = run_diagnose("analyze", str(bundle), "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"]["quadrant"] == "service"
    assert doc["capture"]["end_reason"] == "capturing"  # the manifest was never finalized


def test_pyspy_permission_error_is_not_called_process_gone():
    from diagnose.collectors.pyspy import classify_failure

    out = ("Error: Failed to get process executable name. Check that the process is running.\n"
           "Caused by:\n    Permission denied (os error 13)")
    assert classify_failure(out, target_alive=True).startswith("permission denied")
    assert "ptrace_scope" in classify_failure(out, target_alive=True)
    gone = "Error: Failed to get process executable name. Check that the process is running."
    assert classify_failure(gone, target_alive=False).startswith("process gone")


def test_report_to_an_unwritable_path(tmp_path):
    from helpers import REPO

    res = run_diagnose("report", str(REPO / "fixtures/cpu/service-json"), "-o", str(tmp_path / "no/such/dir/r.md"))
    assert res.returncode == 2
    assert len(error_lines(res)) == 1 and "cannot write" in res.stderr


def test_out_that_root_may_access_but_not_write_is_a_usage_error(tmp_path):
    """/sys passes access(W_OK) for root, yet no directory can be made there: exit 2, not 3."""
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no /sys/kernel")
    res = run_diagnose("attach", str(os.getpid()), "--duration", "1", "--no-tui", "--out", "/sys/kernel")
    assert res.returncode == 2 and "cannot create a bundle in /sys/kernel" in res.stderr, res.stderr

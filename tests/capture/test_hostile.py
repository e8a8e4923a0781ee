"""Hostile or unlucky conditions found by trying to break diagnose; each must stay clean."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from helpers import REPO, findings, only_bundle, run_diagnose, wait_for_capture

FIXTURE = REPO / "fixtures" / "cpu" / "service-json"


def copy_bundle(tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "b"
    shutil.copytree(FIXTURE, dst)
    return dst


def test_stopped_target_gets_no_verdict(workload, tmp_path):
    proc = workload("json_loop")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--out", str(tmp_path))
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert res.returncode == 0, res.stderr
    doc = findings(only_bundle(tmp_path))
    assert doc["verdict"]["quadrant"] == "unknown"
    # Issue 16: the headline, the report's first line and the account say it was stopped; the
    # frozen stacks are neither "waiting for work: no load" nor a critical serialization finding
    assert doc["verdict"]["headline"].startswith("No verdict: the target was stopped."), doc["verdict"]
    first = (only_bundle(tmp_path) / "report.md").read_text().split("\n", 1)[0]
    assert first.startswith("# No verdict, the target was stopped: pid"), first
    lead = doc["account"][0]["terms"][0]
    assert lead["kind"] == "stopped" and lead["share"] > 0.9, lead
    assert not [f for f in doc["findings"] if f["quadrant"] not in (None, "secondary")], doc["findings"]
    assert "where the time went" in res.stdout and "stopped" in res.stdout.split("where the time went", 1)[1]


def test_many_threads_undersample_py_spy_and_the_report_says_so(workload, tmp_path):
    """Issue 16: py-spy reads every thread in each round; with 200 threads it sampled each at a few
    Hz instead of 100 and the report said py-spy "ok". The achieved rate per thread is stated in
    the manifest and the report, and stack-based findings lose confidence, saying why."""
    proc = workload("many_threads", "200")
    res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--rate", "100", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    pyspy = {c["name"]: c for c in manifest["collectors"]}["pyspy"]
    assert pyspy["counts"]["threads_max"] >= 200 and pyspy["counts"]["achieved_hz_per_thread_min"] < 25, pyspy
    assert pyspy["state"] == "ok" and "undersampled: each thread sampled at" in pyspy["reason"], pyspy
    doc = findings(bundle)
    dq = doc["data_quality"]
    assert dq["pyspy"]["requested_hz"] == 100 and dq["pyspy"]["achieved_share_pct"] < 25, dq
    assert "threads read in each round" in dq["pyspy"]["undersampled"]
    assert any(w["collectors"] == ["pyspy"] and "py-spy sampled each thread" in w["text"] for w in dq["warnings"])
    stack_based = [f for f in doc["findings"] if any(e["source"].startswith("py-spy") for e in f["evidence"])]
    assert stack_based and all("Lower confidence" in f["summary"] and f["confidence"] < 0.6 for f in stack_based)
    assert "undersampled" in doc["verdict"]["confidence_reason"]
    report = (bundle / "report.md").read_text()
    head = report.split("## Where the time went")[0]
    assert "**Data quality:**" in head and "py-spy sampled each thread at" in head
    assert "pyspy ok (see data quality)" in report


def test_idle_target_gets_no_load_not_a_bottleneck(workload, tmp_path):
    proc = workload("idle")
    res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = findings(only_bundle(tmp_path))
    assert doc["verdict"]["quadrant"] == "no_load" and "no load" in doc["verdict"]["headline"]


def test_thread_id_kernel_thread_and_self_are_refused(tmp_path):
    release = threading.Event()  # the thread lives until the refusal, not a fixed sleep
    t = threading.Thread(target=release.wait, args=(60,))
    t.start()
    try:
        res = run_diagnose("attach", str(t.native_id), "--duration", "2", "--out", str(tmp_path / "o"))
    finally:
        release.set()
        t.join()
    assert res.returncode == 2 and f"is a thread of process {os.getpid()}" in res.stderr
    res = run_diagnose("attach", "2", "--duration", "2", "--out", str(tmp_path / "o"))
    if Path("/proc/2/stat").exists() and "kthreadd" in Path("/proc/2/stat").read_text():
        assert res.returncode == 2 and "kernel thread" in res.stderr


def test_nan_and_infinite_durations_are_usage_errors(tmp_path):
    for bad in ("nan", "inf", "0.5", "1e9"):
        res = run_diagnose("attach", "1", "--duration", bad, "--out", str(tmp_path))
        assert res.returncode == 2, bad
        assert "seconds" in res.stderr


def test_sighup_mid_capture_leaves_partial_bundle_and_report(workload, tmp_path):
    proc = workload("json_loop")
    diag = subprocess.Popen([sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_capture(tmp_path, diag)  # its handlers are installed once it captures
    diag.send_signal(signal.SIGHUP)
    diag.communicate(timeout=60)
    assert diag.returncode == 0
    manifest = json.loads((only_bundle(tmp_path) / "manifest.json").read_text())
    assert "SIGHUP" in manifest["end_reason"] and (only_bundle(tmp_path) / "report.md").is_file()


def attach_odd_source(tmp_path: Path, arg: bytes):
    proc = subprocess.Popen([sys.executable, str(REPO / "tests/workloads/odd_source.py"), arg],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdout.readline()
        t0 = time.monotonic()
        res = run_diagnose("attach", str(proc.pid), "--duration", "3", "--out", str(tmp_path))
        assert time.monotonic() - t0 < 30  # reading "/dev/zero" as source would never end
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert res.returncode == 0, res.stderr
    return only_bundle(tmp_path)


def test_frame_filename_naming_a_device(tmp_path):
    bundle = attach_odd_source(tmp_path, b"plain")
    assert findings(bundle)["data_quality"]["pyspy"]["samples"] > 10


def test_non_utf8_argv_still_gets_a_report(tmp_path):
    bundle = attach_odd_source(tmp_path, b"caf\xe9")
    report = (bundle / "report.md").read_text()
    assert "caf" in report and "not valid UTF-8" in report


def test_malformed_manifest_is_one_line_error(tmp_path):
    b = copy_bundle(tmp_path)
    m = json.loads((b / "manifest.json").read_text())
    for bad in ({"collectors": "abc"}, {"collectors": [1, 2]}, {"started_ns": "x"},
                {"collectors": [{"name": "pyspy", "state": "weird"}]}, {"target": "x"}):
        (b / "manifest.json").write_text(json.dumps({**m, **bad}))
        res = run_diagnose("analyze", str(b))
        assert res.returncode == 2, (bad, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "malformed" in res.stderr


def test_malformed_streams_cost_their_signals_not_the_report(tmp_path):
    b = copy_bundle(tmp_path)
    (b / "process.jsonl").write_text('{"t_ns": 1, "cpu_user_s": "x", "cpu_system_s": 0}\n' * 3)
    (b / "pyspy.jsonl").write_text('{"window": 1, "file": "/dev/zero"}\n{"window": 2, "file": "../../etc/passwd"}\n')
    res = run_diagnose("analyze", str(b), "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    # each malformed record is dropped and counted (not the stream, not the report)
    assert doc["data_quality"]["streams"]["invalid_records"] == {"process.jsonl": 3}
    assert doc["signals"]["cpu.process_util_pct"]["value"] is None
    assert doc["verdict"]["quadrant"] == "unknown"


def test_planted_symlink_is_never_written_through(tmp_path):
    b = copy_bundle(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (b / "findings.json.tmp").symlink_to(victim)
    (b / "report.md").symlink_to(victim)
    res = run_diagnose("analyze", str(b))
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "precious"
    assert not (b / "report.md").is_symlink()


def test_runtime_dir_symlink_is_refused(tmp_path, monkeypatch):
    from diagnose.agent.inproc.rundir import RuntimeDirError, runtime_dir

    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    from diagnose.agent.inproc import rundir

    monkeypatch.setattr(rundir, "ROOT_PARENT", tmp_path / "no-run")  # root too: the <tmp> scheme
    (tmp_path / f"diagnose-{os.getuid()}").symlink_to(target)
    try:
        runtime_dir()
        raise AssertionError("a symlinked runtime dir was accepted")
    except RuntimeDirError as exc:
        assert "not a directory" in str(exc)
    assert (target.stat().st_mode & 0o777) == 0o755


def test_agent_protocol_answers_deeply_nested_json():
    import socket as _socket

    from diagnose.agent.inproc import protocol
    a, b = _socket.socketpair()
    with a, b:
        a.sendall(b"[" * 30000 + b"\n")
        try:
            protocol.read_message(b, 3.0)
            raise AssertionError("nested JSON was accepted")
        except protocol.ProtocolError as exc:
            assert "not a JSON message" in str(exc)


def test_import_of_hostile_files_is_one_line_exit_2(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 30000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in ((deep, "not a recognised artifact"), (fifo, "not a regular file")):
        res = run_diagnose("analyze", str(path), "--out", str(tmp_path / "out"))
        assert res.returncode == 2, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and words in res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_window_of_millions_of_tiny_objects_is_not_parsed(tmp_path):
    import resource

    b = copy_bundle(tmp_path)
    window = sorted((b / "pyspy").glob("*.json"))[0]
    window.write_bytes(b"[" + b"{}," * 20_000_000 + b"{}]")  # 60 MB that would parse to ~1.5 GB of dicts
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res = run_diagnose("analyze", str(b))
    assert res.returncode == 0, res.stderr
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < max(before, 1 << 20)  # KiB: under 1 GiB


def test_a_process_cpu_counter_that_goes_backwards_is_no_reading(tmp_path):
    """Break-it review: decreasing cpu_user_s gave "process CPU -997.3%" and a failing cpu gate."""
    b = copy_bundle(tmp_path)
    lines = (b / "process.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    for k, r in enumerate(recs):
        r["cpu_user_s"] = 1000.0 - k
    (b / "process.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = run_diagnose("analyze", str(b), "--format", "json")
    assert res.returncode == 0, res.stderr
    sig = json.loads(res.stdout)["signals"]["cpu.process_util_pct"]
    assert sig["value"] is None and "went backwards" in sig["reason"], sig


def test_a_frozen_stack_between_sparse_readings_is_stopped_not_a_lock_wait():
    """On a busy host the /proc readings (nice 19) of a SIGSTOPped target came 0.4-0.6 s apart, and
    py-spy's one 1.8 s segment of its frozen stack had no reading near its middle: it read as
    "waiting on a lock" (tests above, 3 runs in 5 under four busy loops)."""
    from diagnose.signals.threads import KernelTimeline, Reading, ThreadUsage

    def usage(*readings: tuple[int, str]) -> ThreadUsage:
        return ThreadUsage(7, readings=[Reading(t * 10**6, cls, None, None) for t, cls in readings])

    gaps = KernelTimeline({7: usage((0, "stopped"), (100, "stopped"), (200, "stopped"), (800, "stopped"),
                                    (1500, "stopped"), (2000, "stopped"))})
    assert gaps.at(7, 1150 * 10**6, 60 * 10**6) is None  # the segment's middle: no reading near
    assert gaps.stopped_through(7, 10 * 10**6, 1900 * 10**6)
    continued = KernelTimeline({7: usage((0, "stopped"), (100, "stopped"), (200, "stopped"), (900, "running"),
                                         (2000, "stopped"))})
    assert not continued.stopped_through(7, 10 * 10**6, 1900 * 10**6)  # one reading found it running
    assert not gaps.stopped_through(7, 2100 * 10**6, 2900 * 10**6)  # after the last reading: unknown
    assert not gaps.stopped_through(8, 0, 10**9)  # no readings of that thread

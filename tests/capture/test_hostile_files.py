"""Files diagnose writes and reads where others can plant things, found by the break-it review of
the restructure: each must be refused or handled in one line, never followed, never destroyed."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from diagnose.bundle import Bundle, BundleError, write_private_bytes
from diagnose.pipeline import analyse
from diagnose.tui.live.feed import replay_view
from helpers import REPO, only_bundle, run_diagnose, wait_for_capture

SERVICE = REPO / "fixtures" / "cpu" / "service-json"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")


def copy_bundle(tmp_path: Path) -> Path:
    b = tmp_path / "b"
    shutil.copytree(SERVICE, b)
    return b


@needs_root
def test_report_output_never_replaces_a_device_or_fifo(tmp_path):
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (dev, fifo):
        r = run_diagnose("report", str(SERVICE), "-f", "md", "-o", str(target))
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert stat.S_ISCHR(os.lstat(dev).st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_user_named_output_that_is_a_symlink_is_neither_followed_nor_replaced(tmp_path):
    """Break-it review: `sweep --out /dev/stdout` turned the system's /dev/stdout link into a 0600 file;
    `report -o LINK` and `--record LINK` did the same to any link (root's and the user's own included)."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "so"
    link.symlink_to(victim)
    for args in (("report", str(SERVICE), "-o", str(link)), ("baseline", str(SERVICE), "--file", str(link))):
        r = run_diagnose(*args)
        assert r.returncode == 2 and "symbolic link" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
        assert link.is_symlink() and os.readlink(link) == str(victim) and victim.read_text() == "precious"


def test_private_write_leaves_other_files_alone_and_replaces_a_symlink_unfollowed(tmp_path):
    mine = tmp_path / "out.md.tmp"
    mine.write_text("a user's own file")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out.md"
    out.symlink_to(victim)
    write_private_bytes(out, b"report")
    assert mine.read_text() == "a user's own file"  # a temp file of its own, never this one
    assert victim.read_text() == "precious" and not out.is_symlink() and out.read_bytes() == b"report"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.md", "out.md.tmp", "victim"]


def test_manifest_that_is_a_fifo_a_device_or_a_link_out_is_refused_at_once(tmp_path):
    outside = tmp_path / "outside.json"
    shutil.copy(SERVICE / "manifest.json", outside)
    for plant in ("fifo", "zero", "link"):
        b = tmp_path / plant
        shutil.copytree(SERVICE, b)
        (b / "manifest.json").unlink()
        if plant == "fifo":
            os.mkfifo(b / "manifest.json")
        else:
            (b / "manifest.json").symlink_to("/dev/zero" if plant == "zero" else outside)
        t0 = time.monotonic()
        with pytest.raises(BundleError):
            Bundle.open(b)
        assert time.monotonic() - t0 < 5  # no hang on the FIFO, no endless read of /dev/zero


def test_manifest_strings_renderers_join_are_checked(tmp_path):
    b = copy_bundle(tmp_path)
    m = json.loads((b / "manifest.json").read_text())
    for bad in ({"command": [["x"], 1]}, {"target": {**m["target"], "cmdline": [1, 2]}},
                {"collectors": [{"name": "pyspy", "state": []}]}):
        (b / "manifest.json").write_text(json.dumps({**m, **bad}))
        for cmd in (("analyze", str(b)), ("tui", str(b), "--no-tui"), ("report", str(b))):
            r = run_diagnose(*cmd)
            assert r.returncode == 2 and "malformed" in r.stderr, (bad, cmd, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1


def test_live_replay_survives_wrong_typed_process_records(tmp_path):
    b = copy_bundle(tmp_path)
    lines = (b / "process.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    bad = [{**rec, "cpu_user_s": [1]}, {**rec, "t_ns": {"x": 1}}, {**rec, "threads": "abc"}]
    (b / "process.jsonl").write_text("\n".join(lines + [json.dumps(x) for x in bad]) + "\n")
    (b / "threads.jsonl").write_text('{"tid": [1], "comm": "x"}\n' + (SERVICE / "threads.jsonl").read_text())
    header, live = replay_view(analyse(b))
    assert live.verdict is not None and header.status == "captured"


def test_a_huge_threshold_key_gives_a_short_line(tmp_path):
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"x" * 200_000: 1}))
    r = run_diagnose("analyze", str(SERVICE), "--thresholds", str(t))
    assert r.returncode == 2 and len(r.stderr) < 1000 and "unknown threshold" in r.stderr


def test_a_second_ctrl_c_during_the_analysis_still_leaves_the_report(workload, tmp_path):
    proc = workload("json_loop")
    diag = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "30", "--no-tui",
         "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_capture(tmp_path, diag)  # py-spy is sampling: the capture is under way
    diag.send_signal(signal.SIGINT)
    # keep interrupting while it stops, analyses and writes: each only sets the stop flag again
    stop = threading.Event()

    def keep_interrupting() -> None:
        while not stop.wait(0.02) and diag.poll() is None:
            diag.send_signal(signal.SIGINT)

    threading.Thread(target=keep_interrupting, daemon=True).start()
    try:
        out, err = diag.communicate(timeout=90)
    finally:
        stop.set()
    assert diag.returncode in (0, 130, -signal.SIGINT), err  # or a signal after the report was printed
    bundle = only_bundle(tmp_path)
    assert (bundle / "report.md").is_file() and (bundle / "findings.json").is_file(), err

"""A bundle another user prepared: its stream files are opened by descriptor below the bundle,
never through a symlink, regular files only. A FIFO, a device or a symlink (to a root-only file,
to /dev/zero, or a directory swapped for one) planted as a stream file is skipped with a reason
the report states; it never hangs the analysis, never reads the target, never a traceback.

Run as root, the planting is done by another uid (``nobody``) in a forked child that chdirs into
the bundle before dropping its rights (pytest's own temp directories stay root-only)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle import files as files_mod
from diagnose.bundle.files import open_inside
from diagnose.bundle.importers import import_files

NOBODY = 65534
SECRET = "TOPSECRET-4f1c9e"
T0 = 1_700_000_000_000_000_000


def _spans_file(path: Path) -> Path:
    spans = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "GET /x", "kind": 2,
              "startTimeUnixNano": str(T0 + i * 10**8), "endTimeUnixNano": str(T0 + i * 10**8 + 5 * 10**6)}
             for i in range(20)]
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    return path


def _trace_file(path: Path) -> Path:
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5,
               "args": {"stream": 7, "device": 0, "correlation": i}} for i in range(20)]
    path.write_text(json.dumps({"baseTimeNanoseconds": T0, "traceEvents": events}))
    return path


@pytest.fixture
def bundle(tmp_path) -> Path:
    b = import_files([_spans_file(tmp_path / "s.json"), _trace_file(tmp_path / "t.json")], tmp_path / "out")
    if os.geteuid() == 0:  # the bundle is another user's
        for root, dirs, names in os.walk(b):
            for n in [*dirs, *names]:
                os.lchown(Path(root) / n, NOBODY, NOBODY)
        os.chown(b, NOBODY, NOBODY)
    return b


def plant(bundle: Path, act: Callable[[], None]) -> None:
    """Run ``act`` in the bundle directory as another user (as this one when not root)."""
    if os.geteuid() != 0:
        cwd = os.getcwd()
        os.chdir(bundle)
        try:
            act()
        finally:
            os.chdir(cwd)
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(bundle)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            act()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "planting as another user failed"


def analyze(bundle: Path) -> tuple[dict, str]:
    res = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(bundle), "--format", "json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return json.loads((bundle / "findings.json").read_text()), (bundle / "report.md").read_text()


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "shadow"
    path.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    path.chmod(0o600)
    return path


def _swap(name: str, make: Callable[[str], None]) -> Callable[[], None]:
    def act() -> None:
        os.unlink(name)
        make(name)
    return act


@pytest.mark.parametrize("what", ["fifo", "symlink to a root-only file", "symlink to /dev/zero",
                                  "symlink inside the bundle"])
def test_a_planted_stream_file_is_skipped_with_its_reason(bundle, secret, what):
    make = {"fifo": os.mkfifo,
            "symlink to a root-only file": lambda n: os.symlink(str(secret), n),
            "symlink to /dev/zero": lambda n: os.symlink("/dev/zero", n),
            "symlink inside the bundle": lambda n: os.symlink("torch.jsonl", n)}[what]
    plant(bundle, _swap("spans.jsonl", make))
    findings, report = analyze(bundle)  # a FIFO with no writer would block a plain open forever
    why = "a FIFO" if what == "fifo" else "a symlink"
    assert findings["data_quality"]["streams"]["unreadable_members"] == {"spans.jsonl": f"{why}, not a regular file"}
    assert f"**Data quality:** bundle member spans.jsonl not read: {why}, not a regular file." in report
    assert SECRET not in json.dumps(findings) + report
    assert findings["data_quality"]["spans"]["count"] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_device_node_as_a_stream_file_is_never_opened(bundle):
    (bundle / "spans.jsonl").unlink()
    os.mknod(bundle / "spans.jsonl", 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    findings, _ = analyze(bundle)
    unread = findings["data_quality"]["streams"]["unreadable_members"]
    assert unread == {"spans.jsonl": "a character device, not a regular file"}


def test_a_directory_swapped_for_a_symlink_is_not_followed(bundle, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(bundle / "torch", elsewhere)  # the same trace, outside the bundle
    plant(bundle, lambda: (shutil.rmtree("torch"), os.symlink(str(elsewhere), "torch")))
    findings, report = analyze(bundle)
    assert findings["data_quality"]["torch"]["traces"] == 0
    assert findings["data_quality"]["streams"]["unreadable_members"] == {
        "torch/trace-0001.json.gz": "torch: a symlink, not a directory", "torch": "a symlink, not a directory"}
    assert "bundle member torch/trace-0001.json.gz not read: torch: a symlink" in report


def test_the_type_is_checked_on_the_opened_descriptor(bundle, monkeypatch):
    """Between a check of the name and its open, the name may be swapped: what counts is fstat of
    the descriptor opened with O_NOFOLLOW|O_NONBLOCK, so a FIFO swapped in never blocks a read."""
    (bundle / "spans.jsonl").unlink()
    os.mkfifo(bundle / "spans.jsonl")
    real_stat = os.stat

    def stale_stat(path, *args, **kwargs):  # what the name was when it was checked: a regular file
        st = real_stat(path, *args, **kwargs)
        return os.stat_result((stat.S_IFREG | 0o600, *tuple(st)[1:])) if path == "spans.jsonl" else st

    monkeypatch.setattr(files_mod.os, "stat", stale_stat)
    with pytest.raises(OSError) as exc:
        os.close(open_inside(bundle, "spans.jsonl"))
    assert exc.value.errno == errno.EINVAL and "a FIFO" in exc.value.strerror
    b = Bundle.open(bundle)
    assert b.records("spans.jsonl") is not None and list(b.records("spans.jsonl")) == []
    assert b.unreadable == {"spans.jsonl": "a FIFO, not a regular file"}


@pytest.mark.parametrize("name", ["../s.json", "/etc/passwd", "torch/../spans.jsonl", "", "torch//x"])
def test_names_that_leave_the_bundle_are_refused(bundle, name):
    with pytest.raises(OSError) as exc:
        os.close(open_inside(bundle, name))
    assert exc.value.errno == errno.EINVAL
    assert Bundle.open(bundle).member(name) is None

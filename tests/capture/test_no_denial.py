"""No denial of service by other users: the attach lock and the runtime directory cannot be
taken away by a local user who gets there first (a setuid child plays that user)."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from diagnose.agent.inproc import rundir
from diagnose.capture.attach_lock import AttachLock, socket_name
from diagnose.capture.target import TargetError
from helpers import NOBODY, AsUid

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another uid with setuid: needs root")


@pytest.fixture
def private_run(tmp_path, monkeypatch):
    """Root's runtime directory under a private stand-in for /run (root-owned, 0755)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    monkeypatch.setattr(rundir, "ROOT_PARENT", run)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    return run


@pytest.fixture
def sticky_tmp(monkeypatch):
    """A world-writable sticky TMPDIR, like /tmp, in which other users can create names (in /tmp:
    pytest's own directories are 0700, out of their reach)."""
    tmp = Path(tempfile.mkdtemp(prefix="dg-sq-", dir="/tmp"))
    os.chmod(tmp, 0o1777)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield tmp
    shutil.rmtree(tmp)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


def squat_dir(path: Path):
    def action():
        os.mkdir(path)
        os.chmod(path, 0o777)
    return action


def bind_name(pid: int, listen: bool):
    def action():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(socket_name(pid))
        if listen:
            s.listen(1)
        return s
    return action


@needs_root
@pytest.mark.parametrize("listen", [False, True], ids=["bound-only", "listening"])
def test_a_squatter_of_another_uid_does_not_hold_the_attach_lock(private_run, sleeper, listen):
    warned: list[str] = []
    with AsUid(NOBODY, bind_name(sleeper.pid, listen)) as squatter:
        with AttachLock(sleeper.pid, warn=warned.append):
            assert len(warned) == 1, warned
            assert f"pid {squatter} (uid {NOBODY})" in warned[0] and "ignored" in warned[0]
            # a genuine second capture of the same uid is still refused, squatter or not
            with pytest.raises(TargetError, match="already attached"):
                with AttachLock(sleeper.pid, warn=warned.append):
                    pass
        with AttachLock(sleeper.pid, warn=warned.append):  # released: taken again
            pass


@needs_root
def test_a_genuine_holder_of_the_socket_still_refuses_a_second_capture(private_run, sleeper):
    with AttachLock(sleeper.pid, warn=pytest.fail):
        with pytest.raises(TargetError, match=f"capture \\(pid {os.getpid()}, uid 0\\) is already attached"):
            with AttachLock(sleeper.pid, warn=pytest.fail):
                pass
    assert not (private_run / "diagnose" / f"attach-{sleeper.pid}.lock").exists()  # nothing left behind


@needs_root
def test_attach_as_root_goes_on_and_names_the_squatter(private_run, sleeper, tmp_path):
    with AsUid(NOBODY, bind_name(sleeper.pid, listen=False)) as squatter:
        res = subprocess.run(
            [sys.executable, "-m", "diagnose", "attach", str(sleeper.pid), "--duration", "1", "--no-tui",
             "--skip", "pyspy", "--skip", "agent", "--out", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "attach lock" in ln]
    assert len(lines) == 1 and f"pid {squatter} (uid {NOBODY})" in lines[0], res.stderr
    assert "report:" in res.stdout


@needs_root
def test_root_uses_run_diagnose_0700_not_a_name_in_tmp(monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    if not os.path.isdir("/run"):
        pytest.skip("no /run on this host")
    path = rundir.runtime_dir()
    assert str(path) == "/run/diagnose"
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700


@needs_root
def test_a_squatted_tmp_dir_does_not_stop_root(private_run, sticky_tmp):
    with AsUid(NOBODY, squat_dir(sticky_tmp / "diagnose-0")):
        assert rundir.runtime_dir() == private_run / "diagnose"
    assert stat.S_IMODE(os.lstat(private_run / "diagnose").st_mode) == 0o700


@needs_root
def test_a_squatted_directory_is_named_with_its_owner(sticky_tmp, monkeypatch, tmp_path):
    monkeypatch.setattr(rundir, "ROOT_PARENT", tmp_path / "no-run")  # root without /run: the <tmp> scheme
    with AsUid(NOBODY, squat_dir(sticky_tmp / "diagnose-0")):
        with pytest.raises(rundir.RuntimeDirError, match=f"squatted by uid {NOBODY}.*XDG_RUNTIME_DIR"):
            rundir.runtime_dir()
    assert stat.S_IMODE(os.lstat(sticky_tmp / "diagnose-0").st_mode) == 0o777  # not chmod-ed, not removed
    with AsUid(NOBODY, lambda: os.symlink("/etc", sticky_tmp / "diagnose-1")):
        reason = rundir.squatted(rundir.RuntimeDir(sticky_tmp, "diagnose-1", 1))
    assert reason is not None and f"squatted by uid {NOBODY}" in reason and "symlink" in reason


@needs_root
def test_attach_names_the_squatted_directory_of_a_target_started_with_the_agent(sticky_tmp, monkeypatch, tmp_path):
    from diagnose.agent.host.absent import why_no_agent

    monkeypatch.setattr(rundir, "ROOT_PARENT", tmp_path / "no-run")
    env = {**os.environ, "DIAGNOSE_AGENT": "1", "TMPDIR": str(sticky_tmp)}
    env.pop("XDG_RUNTIME_DIR", None)
    with AsUid(NOBODY, squat_dir(sticky_tmp / "diagnose-0")):
        target = subprocess.Popen(["sleep", "30"], env=env)
        try:
            deadline = time.monotonic() + 10  # until exec: before it, /proc shows pytest's own environment
            while b"DIAGNOSE_AGENT" not in Path(f"/proc/{target.pid}/environ").read_bytes():
                assert time.monotonic() < deadline
                time.sleep(0.01)
            why = why_no_agent(target.pid)
        finally:
            target.kill()
            target.wait()
    assert why is not None and f"squatted by uid {NOBODY}" in why and "started with the agent enabled" in why


@needs_root
def test_a_root_agent_starts_although_tmp_diagnose_0_is_squatted(sticky_tmp):
    """The agent in a root target no longer uses <tmp>/diagnose-0: attach finds it in /run/diagnose."""
    from agent_helpers import agent_path, start_service

    with AsUid(NOBODY, squat_dir(sticky_tmp / "diagnose-0")):
        svc = start_service("--no-torch", "--max-s", "20", env={"XDG_RUNTIME_DIR": "", "TMPDIR": str(sticky_tmp)})
        try:
            path = agent_path(svc)
        finally:
            svc.stop()
    assert path.endswith(f"/run/diagnose/agent-{svc.pid}.sock"), path


def test_a_target_holding_its_own_lock_name_cannot_hide_from_diagnosis(private_run):
    code = ("import os, socket, time; s = socket.socket(socket.AF_UNIX); "
            "s.bind('\\0diagnose-attach-%d' % os.getpid()); print('READY', flush=True); time.sleep(30)")
    target = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "READY"
        warned: list[str] = []
        with AttachLock(target.pid, warn=warned.append):
            assert len(warned) == 1 and f"held by pid {target.pid}" in warned[0], warned
    finally:
        target.kill()
        target.wait()

"""The trust boundary on the file system (run as root against another user's files): directories
reached without following another user's symlinks (bundle/files.open_dir), a bundle written through
its directory's descriptor so a swap mid-capture redirects nothing (bundle/writer.py), the staging
directory diagnose makes for a target of another uid and what it takes from it
(collectors/agent_staging.py), and source lines read only where the target could read them
(collectors/source_lines.py)."""
from __future__ import annotations

import errno
import json
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from diagnose.bundle import BundleWriter
from diagnose.bundle.files import open_dir, write_private_bytes
from diagnose.collectors import agent_staging
from diagnose.collectors.source_lines import Credentials, read_source

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files of another uid: needs root")


@needs_root
def test_a_directory_link_of_another_user_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    theirs = tmp_path / "theirs"
    theirs.symlink_to(victim)
    os.lchown(theirs, NOBODY, NOBODY)
    with pytest.raises(OSError) as exc:
        write_private_bytes(theirs / "report.md", b"x")
    assert exc.value.errno == errno.ELOOP and "uid 65534" in str(exc.value)
    assert list(victim.iterdir()) == []
    ours = tmp_path / "ours"
    ours.symlink_to(victim)  # root's own link: followed, as the kernel would
    write_private_bytes(ours / "report.md", b"x")
    assert (victim / "report.md").read_bytes() == b"x"
    os.close(open_dir(ours))


def test_a_bundle_swapped_for_a_symlink_mid_capture_redirects_no_write(tmp_path):
    from diagnose.pipeline import DocumentsNotWritten, analyse, write_documents

    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.mkdir()
    w = BundleWriter.create(out, 1234, datetime.now(timezone.utc))
    w.stream("spans.jsonl").write({"a": 1})
    moved = out / "moved"
    os.rename(w.path, moved)  # another user owning --out swaps the bundle for a link to a place they chose
    w.path.symlink_to(victim)
    w.stream("gc.jsonl").write({"b": 2})
    w.write_manifest({"schema_version": 1, "target": {"pid": 1234}, "collectors": []})
    w.file_path("pyspy").mkdir()  # what a producer such as py-spy is given
    (w.file_path("pyspy") / "window-0001.json").write_text("[]")
    identity = w.identity
    w.close()
    assert list(victim.iterdir()) == []
    assert {p.name for p in moved.iterdir()} == {"spans.jsonl", "gc.jsonl", "manifest.json", "pyspy"}
    assert stat.S_IMODE((moved / "manifest.json").stat().st_mode) == 0o600
    (victim / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(DocumentsNotWritten) as exc:
        write_documents(analyse(w.path), identity)
    assert "no longer the directory this capture wrote" in str(exc.value)
    assert sorted(p.name for p in victim.iterdir()) == ["manifest.json"]


@needs_root
def test_staging_is_made_by_diagnose_and_handed_to_the_target(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, NOBODY, NOBODY)
    route = f"/proc/{os.getpid()}/root{runtime}/agent-1.sock"  # how attach reaches a socket in the target's root
    host, inside, identity = agent_staging.create_staging(route, NOBODY)
    st = os.lstat(host)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o700)
    assert inside == f"{runtime}/{host.name}" and host.name.startswith(f"capture-{os.getpid()}-")
    assert identity == (st.st_dev, st.st_ino)
    os.rename(host, runtime / "moved")  # the target swaps in a directory of its own: not collected
    os.mkdir(host)
    os.chown(host, NOBODY, NOBODY)
    with pytest.raises(agent_staging.StagingRefused, match="not the one diagnose made"):
        agent_staging.collect(host, tmp_path, NOBODY, identity=identity)
    link_dir = tmp_path / "hop"
    link_dir.symlink_to("/etc")  # the socket's directory reached through the target's own link
    os.lchown(link_dir, NOBODY, NOBODY)
    with pytest.raises(agent_staging.StagingRefused, match="symlink of uid 65534"):
        agent_staging.create_staging(f"/proc/{os.getpid()}/root{link_dir}/agent-1.sock", NOBODY)
    assert not list(Path("/etc").glob("capture-*"))
    with pytest.raises(agent_staging.StagingRefused, match="belongs to uid 0"):  # root's own directory
        agent_staging.create_staging("/etc/agent-1.sock", NOBODY)
    squatted = tmp_path / "squatted"
    squatted.mkdir()
    os.chown(squatted, 1, 1)  # a directory of a third uid is not the target's
    with pytest.raises(agent_staging.StagingRefused, match="belongs to uid 1"):
        agent_staging.create_staging(str(squatted / "agent.sock"), NOBODY)


@needs_root
def test_staging_yields_only_the_agents_own_regular_files(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    staging, bundle = tmp_path / "staging", tmp_path / "bundle"
    staging.mkdir()
    bundle.mkdir()
    (staging / "spans.jsonl").symlink_to(secret)  # a link to root's file
    os.mkfifo(staging / "gc.jsonl")  # would block a reader forever
    (staging / "torch.jsonl").write_text("not the agent's\n")  # root's own file, not the target's
    traces = staging / agent_staging.TRACE_DIR
    traces.mkdir()
    (traces / "trace-0001.json").write_bytes(b"x" * (9 << 20))  # larger than the bound set below
    with open(traces / "trace-0003.json", "wb") as fh:
        fh.truncate(4 << 20)  # all holes: a disk filled with zeros the agent never wrote
    (traces / "trace-0002.json").write_text("[]")
    os.link(traces / "trace-0002.json", staging / "extra-link")  # two links: not the agent's own
    for p in (staging, traces, *traces.iterdir()):
        os.lchown(p, NOBODY, NOBODY)
    monkeypatch.setattr(agent_staging, "MAX_FILE_BYTES", 8 << 20)
    skipped: list[str] = []
    copied = agent_staging.collect(staging, bundle, NOBODY, skipped)
    assert copied == []
    assert sorted(p.name for p in bundle.rglob("*") if p.is_file()) == []
    assert secret.read_text() == "root only\n" and (staging / "torch.jsonl").exists()  # nothing of root's removed
    reasons = " | ".join(skipped)
    assert "trace-0003.json: a sparse file" in reasons
    for name in ("spans.jsonl", "gc.jsonl", "torch.jsonl", "trace-0001.json", "trace-0002.json"):
        assert name in reasons, (name, reasons)
    os.unlink(staging / "extra-link")
    assert agent_staging.collect(staging, bundle, NOBODY) == [f"{agent_staging.TRACE_DIR}/trace-0002.json"]


def test_source_lines_only_where_the_target_could_read_them():
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="dg-src-"))  # under /tmp: pytest's own directory is 0700
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    hidden = closed / "model.py"  # world-readable, but in a directory others cannot search
    hidden.write_text("hidden = 1\n")
    hidden.chmod(0o644)
    private = tmp_path / "private.py"
    private.write_text("key = 'root only'\n")
    private.chmod(0o600)
    public = tmp_path / "public.py"
    public.write_text("x = 1\n")
    public.chmod(0o644)
    tmp_path.chmod(0o755)
    other = Credentials(NOBODY, frozenset({NOBODY}))
    pid = os.getpid()
    assert read_source(pid, str(public), other) == ["x = 1"]
    assert read_source(pid, str(private), other) is None
    assert read_source(pid, str(hidden), other) is None
    assert read_source(pid, f"{closed}/../public.py", other) is None
    (tmp_path / "to-hidden.py").symlink_to(hidden)  # the last component a link past the closed directory
    (tmp_path / "to-public.py").symlink_to(public)
    (tmp_path / "via").symlink_to(closed)
    assert read_source(pid, str(tmp_path / "to-hidden.py"), other) is None
    assert read_source(pid, str(tmp_path / "via" / "model.py"), other) is None
    assert read_source(pid, str(tmp_path / "to-public.py"), other) == ["x = 1"]
    assert read_source(pid, "/dev/zero", Credentials(0, frozenset())) is None
    assert read_source(pid, "relative.py", other) is None
    me = Credentials.of(pid)
    assert me is not None and me.uid == os.geteuid()
    assert read_source(pid, str(private), me) == ["key = 'root only'"]
    import shutil

    shutil.rmtree(tmp_path)


@needs_root
def test_a_target_naming_roots_file_as_its_source_gets_no_line_of_it(tmp_path):
    import subprocess
    import sys
    import tempfile

    from helpers import REPO, only_bundle, run_diagnose

    secret_dir = Path(tempfile.mkdtemp(prefix="dg-secret-"))
    secret = secret_dir / "id_rsa"
    secret.write_text("SECRET-KEY-MATERIAL\n" * 3)
    secret.chmod(0o600)
    secret_dir.chmod(0o755)
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    proc = subprocess.Popen([*as_nobody, sys.executable, str(REPO / "tests/workloads/named_source.py"), str(secret)],
                            stdout=subprocess.PIPE, start_new_session=True, cwd="/")
    try:
        if not proc.stdout.readline().startswith(b"READY"):
            pytest.skip("uid 65534 cannot run this Python")
        r = run_diagnose("attach", str(proc.pid), "--duration", "2", "--no-tui", "--skip", "agent",
                         "--out", str(tmp_path))
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        secret.unlink()
        secret_dir.rmdir()
    assert r.returncode == 0, r.stderr
    bundle = only_bundle(tmp_path)
    assert str(secret) in "".join(p.read_text() for p in (bundle / "pyspy").glob("*.json"))  # the frame was seen
    sources = (bundle / "pyspy-sources.jsonl")
    assert "SECRET" not in (sources.read_text() if sources.exists() else "")


def test_out_swapped_mid_capture_the_report_lands_in_the_capture_not_in_the_swap(tmp_path):
    import subprocess
    import sys
    import threading
    import time

    from helpers import run_diagnose

    base = tmp_path / "d"
    base.mkdir()
    out, evil = base / "out", base / "evil"
    target = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])

    def swap():  # another user owning d/ moves out/ away and puts a look-alike in its place
        deadline = time.monotonic() + 20
        while not (out.is_dir() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.05)
        name = next(out.iterdir()).name
        time.sleep(0.5)
        os.rename(out, base / "out.real")
        (evil / name).mkdir(parents=True)
        (evil / name / "manifest.json").write_text(json.dumps({"schema_version": 1}))
        out.symlink_to(evil)

    t = threading.Thread(target=swap)
    t.start()
    try:
        r = run_diagnose("attach", str(target.pid), "--duration", "3", "--no-tui", "--skip", "pyspy",
                         "--skip", "agent", "--out", str(out))
    finally:
        t.join()
        target.kill()
        target.wait()
    assert r.returncode == 0, r.stderr
    assert "no longer names the bundle directory" in r.stderr and "out.real" in r.stderr
    [real] = list((base / "out.real").iterdir())
    assert (real / "report.md").is_file() and (real / "findings.json").is_file()
    assert not list(evil.rglob("report.md")) and not list(evil.rglob("findings.json"))


@needs_root
def test_out_through_another_users_link_is_refused_before_anything_is_made(tmp_path):
    from helpers import run_diagnose

    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp_path / "out"
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    r = run_diagnose("attach", str(os.getpid()), "--duration", "1", "--no-tui", "--out", str(link / "made" / "by"))
    assert r.returncode == 2, r.stderr
    assert "symlink of uid 65534" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert list(victim.iterdir()) == []

"""The agent in awkward targets: TracerProvider absent, no-op or set late; torch missing; forked
workers; spans without end, ending before they start, or a day long; NVTX mirroring; no agent at
all; --inject. Real services; captures driven through the real AgentCollector."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_helpers import agent_path, read_until, service  # noqa: F401  (fixture)
from diagnose.agent.host.client import held_socket_inodes, listening_sockets, wait_for_agent
from diagnose.agent.inproc import protocol
from diagnose.bundle import BundleWriter, CollectorState
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.agent import AgentCollector
from helpers import WORKLOADS, run_diagnose


def capture(pid: int, out: Path, duration_s: float = 1.5, torch_window_s: float = 1.0):
    target = resolve_target(pid)
    collector = AgentCollector()
    opts = CaptureOptions(duration_s=duration_s, torch_window_s=torch_window_s)
    probe = collector.probe(target, opts)
    assert probe.available, probe.reason
    out.mkdir(mode=0o700, exist_ok=True)
    collector.start(target, opts, BundleWriter(out))
    time.sleep(duration_s)
    return collector.stop(15.0)


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.parametrize("provider, expected", [
    ("none", "has no TracerProvider"),
    ("noop", "NoOpTracerProvider, which records nothing"),
])
def test_absent_or_noop_tracer_provider_is_reported_and_the_rest_still_captured(
        service, tmp_path, provider, expected):  # noqa: F811
    svc = service("--no-torch", "--provider", provider)
    status = capture(svc.pid, tmp_path / "b")
    assert status.state == CollectorState.PARTIAL
    assert expected in status.reason and "spans:" in status.reason
    assert "torch:" in status.reason and "has not imported torch" in status.reason
    assert status.counts["gc_pauses"] > 0 and status.counts["spans"] == 0
    assert not records(tmp_path / "b" / "spans.jsonl")


def test_provider_configured_after_the_agent_started_is_found(service, tmp_path):  # noqa: F811
    svc = service("--no-torch", "--provider", "late")  # set 1 s after start, while we capture
    path = agent_path(svc)
    assert protocol.call(path, "hello")["spans_attached"] is False
    status = capture(svc.pid, tmp_path / "b", duration_s=3.0)
    spans = records(tmp_path / "b" / "spans.jsonl")
    assert status.counts["spans"] == len(spans) > 0
    assert {"request", "queue", "model", "serialize"} <= {s["name"] for s in spans}
    assert "spans:" not in (status.reason or "")
    assert protocol.call(path, "hello")["spans_attached"] is True
    doctor = run_diagnose("doctor", "--pid", str(svc.pid))
    assert f"[ok  ] agent in pid {svc.pid}: agent" in doctor.stdout and "spans attached" in doctor.stdout


def test_torch_missing_in_the_target_environment(service, tmp_path):  # noqa: F811
    venv = tmp_path / "bare"
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    svc = service("60", workload="plain_service", python=str(venv / "bin" / "python"))
    assert any(ln.startswith("TORCH-IMPORT-FAILED") for ln in svc.lines)  # torch really cannot load there
    hello = protocol.call(agent_path(svc), "hello")
    assert hello["torch"] is None and hello["executable"].startswith(str(venv))
    status = capture(svc.pid, tmp_path / "b", torch_window_s=1.0)
    assert status.state == CollectorState.PARTIAL
    assert "torch is not installed in the target's environment" in status.reason
    assert "opentelemetry is not installed" in status.reason
    assert status.counts["gc_pauses"] > 0


def test_forked_workers_do_not_hold_the_parent_socket_and_get_their_own_agent(service, tmp_path):  # noqa: F811
    svc = service("--no-torch", "--fork", "2")
    parent = svc.pid
    workers = svc.workers
    assert len(workers) == 2
    parent_path = agent_path(svc)
    [(_, parent_inode)] = listening_sockets(parent, {protocol.socket_name(parent)})
    for w in workers:
        assert parent_inode not in held_socket_inodes(w)  # closed in the child right after fork
        handle = wait_for_agent(w, 20)
        assert handle.hello.pid == w and handle.path != parent_path
    status = capture(workers[0], tmp_path / "w0")
    assert status.counts["spans"] > 0
    os.kill(workers[1], signal.SIGINT)  # exits through atexit: removes its own socket only
    deadline = time.monotonic() + 10
    while (svc.runtime_dir / "diagnose" / protocol.socket_name(workers[1])).exists():
        assert time.monotonic() < deadline, "the worker's socket outlived it"
        time.sleep(0.1)
    assert (svc.runtime_dir / "diagnose" / protocol.socket_name(parent)).exists()
    assert protocol.call(parent_path, "hello")["pid"] == parent
    assert capture(parent, tmp_path / "p").counts["spans"] > 0


def test_spans_open_ending_before_start_or_a_day_long(service, tmp_path):  # noqa: F811
    svc = service("--no-torch", "--bad-spans")
    status = capture(svc.pid, tmp_path / "b", duration_s=2.0)
    spans = records(tmp_path / "b" / "spans.jsonl")
    by_name: dict[str, list[dict]] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert "ends-before-start" not in by_name
    assert status.counts["spans_rejected"]["end_before_start"] >= 1
    never = by_name["never-ended"]
    assert never and all(s["end_ns"] is None for s in never)
    assert status.counts["spans_open"] >= len(never)
    day = by_name["day-long"]
    assert day and all(s["end_ns"] - s["start_ns"] == 24 * 3600 * 10**9 for s in day)
    assert status.counts["spans_over_1h"] == len(day)
    assert all(s["end_ns"] is None or s["end_ns"] >= s["start_ns"] for s in spans)


def test_target_exiting_during_the_capture_keeps_what_was_written(service, tmp_path):  # noqa: F811
    svc = service("--no-torch", "--max-s", "4")  # exits 4 s after READY: well after the capture starts
    status = capture(svc.pid, tmp_path / "b", duration_s=6.0)
    assert status.state == CollectorState.PARTIAL, status
    assert "lost the agent" in status.reason and "spans.jsonl" in status.reason
    spans = records(tmp_path / "b" / "spans.jsonl")
    assert spans and all(s["source"] == "agent" for s in spans)  # flushed by the agent at exit


def test_env_variable_start_with_nvtx_mirror_attaches_when_the_app_sets_its_provider(tmp_path):
    pytest.importorskip("nvtx", reason="the nvtx package is needed for the NVTX mirror")
    from diagnose.agent.host.run import agent_env

    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    env = {**agent_env(os.environ, nvtx=True), "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen([sys.executable, str(WORKLOADS / "agent_service.py"), "--no-torch"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        read_until(proc, "READY", 60, [])
        hello = wait_for_agent(proc.pid, 20).hello
        assert "nvtx" in hello.capabilities
        assert hello.spans_attached is True  # attached at set_tracer_provider, before any capture
        status = capture(proc.pid, tmp_path / "b")
        assert status.counts["spans"] > 0
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


def test_without_an_agent_the_status_says_what_is_missing_and_how_to_enable_it(workload):
    proc = workload("json_loop")
    probe = AgentCollector().probe(resolve_target(proc.pid), CaptureOptions())
    assert not probe.available
    for words in ("no diagnose agent", "kernel timeline", "stage spans", "diagnose run --",
                  "diagnose.agent.start()", "DIAGNOSE_AGENT=1"):
        assert words in probe.reason, words


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="checks the refusal below Python 3.14")
def test_inject_below_python_314_is_refused_with_the_reason(workload):
    proc = workload("json_loop")
    probe = AgentCollector().probe(resolve_target(proc.pid), CaptureOptions(agent_inject=True))
    assert not probe.available
    assert "Python >= 3.14" in probe.reason and "sys.remote_exec" in probe.reason


@pytest.mark.skipif(sys.version_info < (3, 14), reason=(
    "--inject uses sys.remote_exec (PEP 768, Python >= 3.14); this is Python "
    f"{sys.version_info[0]}.{sys.version_info[1]} and no 3.14 is installable here (Debian 12 has none, "
    "uv/pbs-installer download from GitHub, which is unreachable)"))
def test_inject_loads_the_agent_into_an_uninstrumented_process(workload, tmp_path):
    proc = workload("json_loop")
    status = capture_with_inject(proc.pid, tmp_path / "b")
    assert status.counts["gc_pauses"] > 0


def capture_with_inject(pid: int, out: Path):
    target = resolve_target(pid)
    collector = AgentCollector()
    opts = CaptureOptions(duration_s=1.5, torch_window_s=0.0, agent_inject=True)
    assert collector.probe(target, opts).available
    out.mkdir(mode=0o700)
    collector.start(target, opts, BundleWriter(out))
    time.sleep(1.5)
    return collector.stop(15.0)


def test_preload_runs_the_sitecustomize_it_shadows(tmp_path):
    from diagnose.agent.host.run import PRELOAD_DIR

    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys; sys.stderr.write('OTHER-SITECUSTOMIZE\\n')\n")
    code = "import sys; from diagnose.agent.inproc.runtime import running; print('AGENT', running() is not None)"
    for flag, agent in (("1", "True"), ("0", "False")):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": f"{PRELOAD_DIR}{os.pathsep}{other}",
                                  "DIAGNOSE_AGENT": flag, "XDG_RUNTIME_DIR": str(tmp_path)})
        assert res.returncode == 0, res.stderr
        assert f"AGENT {agent}" in res.stdout and "OTHER-SITECUSTOMIZE" in res.stderr

"""Helpers for the agent tests: services started under `diagnose run`, talking to their agent."""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import REPO, WORKLOADS


@dataclass
class Service:
    proc: subprocess.Popen
    runtime_dir: Path
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def workers(self) -> list[int]:
        return [int(ln.split()[1]) for ln in self.lines if ln.startswith("WORKER ")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # workers too: they share the session
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)

    def stderr_text(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None else ""


def read_until(proc: subprocess.Popen, marker: str, timeout_s: float, lines: list[str]) -> None:
    """Collect stdout lines until one starts with ``marker``. Reads the raw fd: select() on a
    buffered file would miss lines already pulled into its buffer."""
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                lines.append(line.decode(errors="replace").strip())
                if lines[-1].startswith(marker):
                    return
        elif proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"no {marker} line from {proc.args}: {lines} {proc.stderr.read()[-2000:]}")


NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def start_service(*args: str, workload: str = "agent_service", python: str = sys.executable,
                  env: dict | None = None, cwd: Path | None = None, as_nobody: bool = False) -> Service:
    """`python -m diagnose run -- PYTHON tests/workloads/<workload>.py ARGS` with a private runtime dir."""
    runtime = Path(tempfile.mkdtemp(prefix="dg-"))  # short: Unix socket paths are limited to 107 bytes
    if as_nobody:
        os.chown(runtime, NOBODY, NOBODY)
    full_env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "diagnose", "run", "--", *(AS_NOBODY if as_nobody else []),
         python, str(WORKLOADS / f"{workload}.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
        cwd=str(cwd or REPO), start_new_session=True)
    service = Service(proc, runtime)
    try:
        read_until(proc, "READY", 90, service.lines)
    except RuntimeError:
        service.stop()
        raise
    return service


def agent_path(service: Service) -> str:
    from diagnose.agent.host.client import AgentUnavailable, wait_for_agent

    try:
        return wait_for_agent(service.pid, 20).path
    except AgentUnavailable as exc:  # show why the agent did not start (its stderr line)
        err = b""
        while select.select([service.proc.stderr], [], [], 0)[0]:
            chunk = os.read(service.proc.stderr.fileno(), 65536)
            if not chunk:
                break
            err += chunk
        raise AssertionError(f"{exc}; service stderr: {err.decode(errors='replace')[-2000:]}") from None


@pytest.fixture
def service():
    """Start services under `diagnose run`; all of them (and their workers) are killed afterwards."""
    started: list[Service] = []

    def _start(*args: str, **kw) -> Service:
        s = start_service(*args, **kw)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()

"""``diagnose run -- <command>``: start any Python command with the agent preloaded.

The preload is ``diagnose/agent/preload/sitecustomize.py``, put first on PYTHONPATH, with
DIAGNOSE_AGENT=1. Every Python process of the command (and its Python children, which inherit the
environment) starts an idle agent; ``diagnose attach <pid>`` drives it later. Python started with
``-I`` or ``-E`` ignores PYTHONPATH and gets no agent.

Without ``--capture`` diagnose replaces itself with the command (exec), so the pid printed by the
shell is the target's and signals reach it directly; the exit code is the command's. With
``--capture SECONDS`` diagnose stays the parent: it waits for the agent, captures, writes the
report, then waits for the command to end and returns its exit code.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

from diagnose.agent.inproc.runtime import ENV_AGENT, ENV_NVTX

PRELOAD_DIR = Path(__file__).resolve().parent.parent / "inproc" / "preload"
AGENT_WAIT_S = 30.0


class RunError(Exception):
    """The command cannot be run as asked; the message names the cause and the fix."""


def agent_env(base: Mapping[str, str], nvtx: bool = False) -> dict[str, str]:
    """``base`` plus the preload first on PYTHONPATH and DIAGNOSE_AGENT=1."""
    env = dict(base)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(PRELOAD_DIR)]
    env["PYTHONPATH"] = os.pathsep.join([str(PRELOAD_DIR), *rest])
    env[ENV_AGENT] = "1"
    if nvtx:
        env[ENV_NVTX] = "1"
    return env


def print_env(nvtx: bool = False) -> str:
    """Shell lines that enable the agent for any later Python process (containers, systemd units)."""
    env = agent_env(os.environ, nvtx)
    lines = [f"export PYTHONPATH={env['PYTHONPATH']}", f"export {ENV_AGENT}=1"]
    if nvtx:
        lines.append(f"export {ENV_NVTX}=1")
    return "\n".join(lines)


def exec_command(command: list[str], nvtx: bool) -> NoReturn:
    """Replace this process with ``command``. Raises RunError when it cannot be executed."""
    try:
        os.execvpe(command[0], command, agent_env(os.environ, nvtx))
    except FileNotFoundError:
        raise RunError(f"command not found: {command[0]}; check the name and PATH") from None
    except PermissionError:
        raise RunError(f"{command[0]} is not executable; check its permissions") from None


def run_with_capture(command: list[str], nvtx: bool, after_s: float,
                     capture: Callable[[int], int]) -> int:
    """Start ``command``, wait ``after_s`` and for its agent, run ``capture(pid)``, then wait for it.

    Returns the command's exit code (128 + signal number if a signal ended it).
    """
    try:
        child = subprocess.Popen(command, env=agent_env(os.environ, nvtx))
    except FileNotFoundError:
        raise RunError(f"command not found: {command[0]}; check the name and PATH") from None
    except PermissionError:
        raise RunError(f"{command[0]} is not executable; check its permissions") from None
    _wait_ready(child, after_s)
    if child.poll() is None:
        capture(child.pid)
    return _wait_child(child)


def _wait_ready(child: subprocess.Popen, after_s: float) -> None:
    from diagnose.agent.host.client import AgentUnavailable, wait_for_agent

    deadline = time.monotonic() + after_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        wait_for_agent(child.pid, AGENT_WAIT_S, alive=lambda: child.poll() is None)
    except AgentUnavailable as exc:
        if child.poll() is None:
            sys.stderr.write(f"diagnose: {exc} after {AGENT_WAIT_S:g} s (not a Python command?); "
                             "capturing without it\n")


def _wait_child(child: subprocess.Popen) -> int:
    """Forward SIGINT/SIGTERM to the command until it exits."""
    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    code = child.wait()
    return 128 - code if code < 0 else code

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
import shutil
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
NOT_PYTHON_GRACE_S = 0.5  # a wrapper (`sh -c "exec python ..."`) may exec Python a moment later
EXIT_NOTHING = 3  # README exit codes: nothing captured


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
    """Replace this process with ``command``, after one line on stderr naming the pid to attach to
    (the same: exec keeps it). Raises RunError when it cannot be executed."""
    env = agent_env(os.environ, nvtx)
    if shutil.which(command[0], path=env.get("PATH")) is not None:
        sys.stderr.write(f"diagnose: pid {os.getpid()} runs {command[0]} with the agent preloaded; it idles "
                         f"until `diagnose attach {os.getpid()}`\n")
        sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        raise RunError(f"command not found: {command[0]}; check the name and PATH") from None
    except PermissionError:
        raise RunError(f"{command[0]} is not executable; check its permissions") from None


def run_with_capture(command: list[str], nvtx: bool, after_s: float,
                     capture: Callable[[int], int]) -> int:
    """Start ``command``, wait ``after_s`` and for its agent, run ``capture(pid)``, then wait for it.

    Returns the command's exit code (128 + signal number if a signal ended it), or the capture's
    when the command's is 0 and the capture's is not; EXIT_NOTHING (3) when the command ended
    before the capture could start (one line says so, with the command's own exit code). A command
    that starts no agent (not Python, or an agent that cannot start) is said in one line and
    captured without it. SIGINT/SIGTERM before and after the capture are forwarded to the command.
    """
    try:
        child = subprocess.Popen(command, env=agent_env(os.environ, nvtx))
    except FileNotFoundError:
        raise RunError(f"command not found: {command[0]}; check the name and PATH") from None
    except PermissionError:
        raise RunError(f"{command[0]} is not executable; check its permissions") from None
    _forward_signals(child)
    wait_ready(child, after_s)
    if child.poll() is not None:
        sys.stderr.write(f"diagnose: {command[0]} (pid {child.pid}) exited with code "
                         f"{_exit_code(child.returncode)} before the capture could start: nothing captured\n")
        return EXIT_NOTHING
    captured = capture(child.pid)
    _forward_signals(child)  # the capture restored its own handlers
    code = _exit_code(child.wait())
    return code if code != 0 else captured


def wait_ready(child: subprocess.Popen, after_s: float) -> None:
    """Wait ``after_s``, then until the agent answers; say in one line why it will not (the child
    is not a Python process, its runtime directory is squatted, or none after AGENT_WAIT_S)."""
    from diagnose.agent.host.absent import exe_name, is_python, squatted_runtime
    from diagnose.agent.host.client import AgentUnavailable, find_agent

    deadline = time.monotonic() + after_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    python_seen = False
    while child.poll() is None:
        try:
            find_agent(child.pid)
            return
        except AgentUnavailable as exc:
            cause = str(exc)
        waited = time.monotonic() - started
        python_seen = python_seen or is_python(child.pid) is not False  # unreadable: keep waiting
        why = squatted_runtime(child.pid)
        if not python_seen and waited >= NOT_PYTHON_GRACE_S:
            why = f"{exe_name(child.pid)} (pid {child.pid}) is not a Python process: no agent can start in it"
        elif why is None and waited >= AGENT_WAIT_S:
            why = f"{cause} after {AGENT_WAIT_S:g} s"
        if why is not None and child.poll() is None:
            sys.stderr.write(f"diagnose: {why}; capturing without the agent\n")
            return
        time.sleep(0.05)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _forward_signals(child: subprocess.Popen) -> None:
    """Until the capture installs its own, SIGINT/SIGTERM go to the command (it decides)."""
    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)

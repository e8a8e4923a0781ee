"""Why a target has no agent, when the target itself shows it: a non-Python program, or a process
started with the agent enabled whose runtime directory another user squatted.

Everything read here comes from the target (``/proc/<pid>/environ``, ``/proc/<pid>/exe``,
``/proc/<pid>/maps``) and is bounded; the runtime directory it would use is judged by owner with
``lstat`` (diagnose.agent.inproc.rundir), never followed.
"""
from __future__ import annotations

import os
from pathlib import Path

from diagnose.agent.inproc.rundir import choose, squatted

# diagnose.agent.inproc.runtime's names (not imported from there: that module loads the agent)
ENV_AGENT = "DIAGNOSE_AGENT"
ENV_FORKS = "DIAGNOSE_AGENT_FORKS"
_TRUE = ("1", "true", "yes", "on")
MAX_ENVIRON_BYTES = 1 << 20
MAX_MAPS_BYTES = 8 << 20


def target_environ(pid: int) -> dict[str, str] | None:
    """The environment ``pid`` was started with (its first MiB), or None when unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read(MAX_ENVIRON_BYTES)
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def is_python(pid: int) -> bool | None:
    """Whether ``pid`` runs a Python interpreter (its executable is python*, or it maps libpython:
    an embedding server such as uWSGI); None when its /proc entries cannot be read."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    if os.path.basename(exe).startswith("python"):
        return True
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            return b"libpython" in fh.read(MAX_MAPS_BYTES)
    except OSError:
        return None


def squatted_runtime(pid: int) -> str | None:
    """Why the agent of ``pid`` cannot start, if the target was started with the agent enabled
    (DIAGNOSE_AGENT set) and the runtime directory it would use is squatted; else None."""
    env = target_environ(pid)
    if env is None or env.get(ENV_AGENT, "").strip().lower() not in _TRUE:
        return None
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    reason = squatted(choose(uid, env))
    if reason is None:
        return None
    return f"pid {pid} was started with the agent enabled, but its runtime directory {reason}; then restart it"


def why_no_agent(pid: int) -> str | None:
    """The cause the target shows for having no agent although it was started with one: its
    runtime directory is squatted, or the agent failed to start (its stderr says why). None when
    it shows none (started without the agent)."""
    squat = squatted_runtime(pid)
    if squat is not None:
        return squat
    env = target_environ(pid) or {}
    enabled = env.get(ENV_AGENT, "").strip().lower() in _TRUE
    forks = env.get(ENV_FORKS, "1").strip().lower() in _TRUE  # a worker may have none by design
    if enabled and forks and is_python(pid):
        return (f"pid {pid} was started with {ENV_AGENT}=1 but no agent listens in it (Python run with -I or "
                "-E ignores the preload; otherwise its stderr says why: 'diagnose: agent not started: ...')")
    return None


def exe_name(pid: int) -> str:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name
    except OSError:
        return f"pid {pid}"

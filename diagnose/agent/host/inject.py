"""``--inject``: load the agent into a running, uninstrumented Python >= 3.14 process (PEP 768).

``sys.remote_exec(pid, script)`` asks the target's interpreter to run ``script`` at its next safe
point (between bytecodes, on the main thread): a target blocked in a long C call runs it when the
call returns. Both diagnose and the target must run CPython >= 3.14 of the same minor version, the
target must not disable remote debugging (PYTHON_DISABLE_REMOTE_DEBUG, -X disable_remote_debug),
and the caller needs ptrace rights on it (root, or same user with kernel.yama.ptrace_scope=0).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from diagnose.agent.host.client import AgentHandle, AgentUnavailable, wait_for_agent

MIN_VERSION = (3, 14)
INJECT_WAIT_S = 10.0
BOOTSTRAP = Path(__file__).with_name("bootstrap.py")


class InjectError(Exception):
    """The agent could not be injected; the message names the cause and the fix."""


def unsupported_reason(version: tuple[int, ...] = tuple(sys.version_info[:2])) -> str | None:
    if tuple(version[:2]) < MIN_VERSION or not hasattr(sys, "remote_exec"):
        return (f"--inject needs diagnose itself to run on Python >= 3.14 (sys.remote_exec, PEP 768); "
                f"this diagnose runs on {version[0]}.{version[1]}: start the service under `diagnose run` "
                "or call diagnose.agent.start() in it instead")
    return None


def script_text(bootstrap: Path = BOOTSTRAP) -> str:
    """The code the target runs: load bootstrap.py by path, then start the agent."""
    return (
        "def _diagnose_inject():\n"
        f"    boot = {str(bootstrap)!r}\n"
        "    ns = {'__name__': 'diagnose_agent_bootstrap', '__file__': boot}\n"
        "    with open(boot, encoding='utf-8') as fh:\n"
        "        exec(compile(fh.read(), boot, 'exec'), ns)\n"
        "    ns['start_agent'](from_env=False)\n"
        "_diagnose_inject()\n"
        "del _diagnose_inject\n"
    )


def inject(pid: int, target_uid: int, alive=lambda: True, wait_s: float = INJECT_WAIT_S) -> AgentHandle:
    """Inject the agent into ``pid`` and wait until it answers. Raises InjectError."""
    reason = unsupported_reason()
    if reason or sys.version_info < (3, 14):  # the version test again, literally: type checkers read it
        raise InjectError(reason or "sys.remote_exec needs Python >= 3.14")
    fd, name = tempfile.mkstemp(prefix="diagnose-inject-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(script_text())
        if target_uid != os.geteuid():
            os.chown(name, target_uid, -1)  # the target must be able to read it; still 0600
        try:
            sys.remote_exec(pid, name)
        except (OSError, RuntimeError, ValueError) as exc:
            raise InjectError(f"sys.remote_exec into pid {pid} failed: {exc} (the target must run Python "
                              f"{sys.version_info[0]}.{sys.version_info[1]} with remote debugging enabled, "
                              "and diagnose needs ptrace rights on it)") from None
        try:
            return wait_for_agent(pid, wait_s, alive)
        except AgentUnavailable as exc:
            raise InjectError(f"injected into pid {pid}, but no agent answered within {wait_s:g} s ({exc}); "
                              "the target runs injected code only between bytecodes of its main thread") from None
    finally:
        os.unlink(name)

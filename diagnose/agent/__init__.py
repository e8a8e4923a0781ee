"""The in-process agent: torch profiler on demand, OpenTelemetry spans and GC pauses, on request.

Start it in the service with ``diagnose run -- <command>``, with ``DIAGNOSE_AGENT=1`` plus the
preload directory on PYTHONPATH (``diagnose run --print-env``), or from code::

    import diagnose.agent
    diagnose.agent.start()

It listens on a private Unix socket named by the pid and does nothing until ``diagnose attach``
asks it for a capture. Everything heavy is imported lazily; this module imports nothing.
"""
from __future__ import annotations

from pathlib import Path


def start(nvtx: bool = False, follow_forks: bool = True) -> Path:
    """Start the agent in this process (idempotent) and return its socket path.

    ``nvtx``: mirror OpenTelemetry spans as NVTX ranges (needs the ``nvtx`` package).
    ``follow_forks``: a forked child starts its own agent. Raises AgentError.
    """
    from diagnose.agent.inproc.runtime import start as _start

    return _start(nvtx=nvtx, follow_forks=follow_forks)


def start_from_env() -> Path:
    """start() configured by DIAGNOSE_AGENT_NVTX and DIAGNOSE_AGENT_FORKS."""
    from diagnose.agent.inproc.runtime import start_from_env as _start

    return _start()


def stop() -> None:
    """Stop the agent of this process (ends a running capture, removes the socket)."""
    from diagnose.agent.inproc.runtime import stop as _stop

    _stop()


__all__ = ["start", "start_from_env", "stop"]

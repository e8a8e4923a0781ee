"""`diagnose doctor --pid PID`: is there an agent in the target, and what can it capture."""
from __future__ import annotations

from diagnose.doctor.host import Check


def agent_checks(pid: int | None) -> list[Check]:
    """One check for the agent of ``pid`` (nothing without a pid). Reads only: a ``hello``."""
    if pid is None:
        return []
    from diagnose.agent.host.client import AgentUnavailable, find_agent
    from diagnose.collectors.agent import missing_reason

    try:
        hello = find_agent(pid).hello
    except AgentUnavailable as exc:
        why, _, fix = missing_reason(pid, str(exc)).partition("; enable them by ")
        return [Check(f"agent in pid {pid}", "warn", why, "enable it by " + fix)]
    torch = f"torch {hello.torch}" if hello.torch else "torch not imported"
    otel = ("spans attached" if hello.spans_attached else
            f"OpenTelemetry {hello.opentelemetry}" if hello.opentelemetry else "no OpenTelemetry")
    return [Check(f"agent in pid {pid}", "ok",
                  f"agent {hello.agent_version} (protocol {hello.protocol}), Python "
                  f"{hello.python}, {torch}, {otel}; capabilities: {', '.join(hello.capabilities)}")]

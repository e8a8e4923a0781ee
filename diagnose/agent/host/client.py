"""Attach side: find the agent of a pid and talk to it.

Discovery reads ``/proc/<pid>/net/unix`` for a listening socket named ``agent-<pid>.sock`` (the pid
as the target sees it: the last ``NSpid`` entry, so containers work), keeps only sockets the target
itself holds (inodes in ``/proc/<pid>/fd``), connects through ``/proc/<pid>/root`` when it can
(the target's mount namespace) and checks that ``hello`` answers with the target's pid.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnose.agent.host.replies import Hello, checked, hello_of, reply_of
from diagnose.agent.inproc import protocol

_LISTENING = 0x00010000  # __SO_ACCEPTCON in /proc/net/unix Flags
HELLO_TIMEOUT_S = 3.0
# All candidates together: a target that opens many sockets named like the agent's and stalls on
# each cannot hold the capture's start longer than this.
HELLO_BUDGET_S = 3.0
MAX_CANDIDATES = 4


class AgentUnavailable(Exception):
    """No usable agent in the target; the message says why."""


@dataclass(frozen=True)
class AgentHandle:
    pid: int
    path: str
    hello: Hello

    def call(self, op: str, timeout_s: float = 5.0, **args: Any) -> dict[str, Any]:
        """The reply, its shape checked (replies.py). Raises OSError, TimeoutError, ProtocolError."""
        return checked(protocol.call(self.path, op, timeout_s, **args))


def namespace_pids(pid: int) -> list[int]:
    """The pid of ``pid`` in each pid namespace it belongs to (host first), from /proc/<pid>/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    except OSError:
        pass
    return [pid]


def listening_sockets(pid: int, names: set[str]) -> list[tuple[str, int]]:
    """(path, inode) of listening Unix sockets in the target's network namespace with those names."""
    try:
        lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(None, 7)  # the path (8th field) may hold spaces
        if len(fields) < 8 or not int(fields[3], 16) & _LISTENING:
            continue
        path = fields[7]
        if os.path.basename(path) in names:
            out.append((path, int(fields[6])))
    return out


def held_socket_inodes(pid: int) -> set[int] | None:
    """Socket inodes the target holds open, or None if its fds cannot be read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def find_agent(pid: int) -> AgentHandle:
    """The agent of ``pid``. Raises AgentUnavailable with the precise cause."""
    pids = namespace_pids(pid)
    names = {protocol.socket_name(p) for p in pids}
    candidates = listening_sockets(pid, names)
    held = held_socket_inodes(pid)
    if held is not None:
        candidates = [(p, inode) for p, inode in candidates if inode in held]
    if not candidates:
        raise AgentUnavailable(f"no diagnose agent is listening in pid {pid}")
    errors = []
    deadline = time.monotonic() + HELLO_BUDGET_S
    for path, _ in candidates[:MAX_CANDIDATES]:
        for route in (f"/proc/{pid}/root{path}", path):
            left = deadline - time.monotonic()
            if left <= 0:
                errors.append(f"no answer within {HELLO_BUDGET_S:g} s")
                break
            try:
                raw = protocol.call(route, "hello", min(HELLO_TIMEOUT_S, left))
                reply = reply_of(raw)
            except (OSError, protocol.ProtocolError) as exc:
                errors.append(f"{route}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
                continue
            if not reply.ok:
                errors.append(f"{route}: {reply.refusal[:200]}")
            elif reply.pid in pids:
                return AgentHandle(pid, route, hello_of(raw))
    raise AgentUnavailable(f"the agent of pid {pid} did not answer: {'; '.join(errors)}")


def wait_for_agent(pid: int, timeout_s: float, alive=lambda: True) -> AgentHandle:
    """Poll ``find_agent`` until it answers, ``alive()`` turns False or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return find_agent(pid)
        except AgentUnavailable:
            if time.monotonic() >= deadline or not alive():
                raise
        time.sleep(0.05)

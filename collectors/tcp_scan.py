"""The target's TCP sockets, read the cheap way: its socket inodes (/proc/<pid>/fd links) against
/proc/<pid>/net/tcp and tcp6, the tables of the target's own network namespace (so a target in a
container is read in its namespace, not diagnose's).

Most of a scan is the kernel's: reading a tcp table walks every bucket of the namespace's TCP hash
tables however few sockets there are (~1.2 ms of system time per table on this 2-core VM, the
fd links ~2 us each). ``TcpScanner`` therefore reads the tables only when the target's set of
socket inodes changed since its last scan (a connection accepted, opened or closed changes it), or
at least every FULL_EVERY scans (a socket's state can change under the same inode: a peer closing a
connection the target still holds); otherwise it repeats the last reading, and counts both kinds.
Only the rows of the target's inodes are split, and only the fields the analysis reads are kept:
state, local port, remote port. What the kernel writes there is read as untrusted text: a row that
does not parse is skipped.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

LISTEN = "0A"  # include/net/tcp_states.h TCP_LISTEN, as /proc/net/tcp writes it (hex)
ESTABLISHED = "01"
TABLES = ("tcp", "tcp6")
MAX_PORTS = 16  # listening ports kept in a reading
FULL_EVERY = 5  # the tables are read at least every this many scans (~5 s at the collector's ~1 Hz)


@dataclass(frozen=True)
class TcpSocket:
    """One TCP socket of the target: kernel state (hex, as /proc/net/tcp), local and remote port
    (0 when unbound or unconnected)."""

    state: str
    local_port: int
    remote_port: int


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets ``pid`` holds open (its /proc/<pid>/fd links ``socket:[N]``).
    Raises psutil.NoSuchProcess when it is gone, psutil.AccessDenied when its fds may not be read."""
    base = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(base)
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"{base}/{fd}")
        except OSError:
            continue  # closed since the listing
        if link.startswith("socket:[") and link.endswith("]") and link[8:-1].isdigit():
            inodes.add(int(link[8:-1]))
    return inodes


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1], 16)


def tcp_sockets(pid: int) -> list[TcpSocket]:
    """The TCP sockets (IPv4 and IPv6) ``pid`` holds, from its network namespace's tables.
    Raises psutil.NoSuchProcess / psutil.AccessDenied as ``socket_inodes``."""
    return _tables(pid, socket_inodes(pid))


def _tables(pid: int, inodes: set[int]) -> list[TcpSocket]:
    out: list[TcpSocket] = []
    if not inodes:
        return out
    for table in TABLES:
        try:
            with open(f"/proc/{pid}/net/{table}", "rb") as fh:
                rows = fh.read().split(b"\n")[1:]
        except FileNotFoundError:
            continue  # no IPv6 in this kernel, or the target just ended (the next reading says so)
        except PermissionError:
            raise psutil.AccessDenied(pid) from None
        for row in rows:
            f = row.split()
            # sl local remote st tx:rx tr:when retrnsmt uid timeout inode ...
            if len(f) < 10 or not f[9].isdigit() or int(f[9]) not in inodes:
                continue
            try:
                out.append(TcpSocket(f[3].decode("ascii"), _port(f[1].decode("ascii")), _port(f[2].decode("ascii"))))
            except (ValueError, IndexError, UnicodeDecodeError):
                continue
    return out


def accepted_connections(socks: list[TcpSocket]) -> dict[str, object]:
    """Connections the target accepted on its own listening TCP sockets: an outside view of
    in-flight requests. An idle keep-alive connection counts too: this is an upper bound,
    cross-checked with spans. ``listening_ports``: up to MAX_PORTS, sorted."""
    listening = {s.local_port for s in socks if s.state == LISTEN and s.local_port}
    accepted = sum(1 for s in socks if s.state == ESTABLISHED and s.remote_port and s.local_port in listening)
    return {"listening_ports": sorted(listening)[:MAX_PORTS], "accepted": accepted}


class TcpScanner:
    """One target's TCP readings for the process collector: ``{"connections", "tcp"}`` per scan,
    from the tables only when its socket inodes changed (or every FULL_EVERY scans)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.full_scans = 0
        self.repeated = 0
        self._inodes: set[int] | None = None
        self._last: dict[str, object] = {}
        self._since_full = 0

    def read(self) -> dict[str, object]:
        """Raises psutil.NoSuchProcess / psutil.AccessDenied as ``tcp_sockets``."""
        inodes = socket_inodes(self.pid)
        if inodes == self._inodes and self._since_full < FULL_EVERY - 1:
            self._since_full += 1
            self.repeated += 1
            return self._last
        socks = _tables(self.pid, inodes)
        self._inodes, self._since_full = inodes, 0
        self.full_scans += 1
        self._last = {"connections": len(socks), "tcp": accepted_connections(socks)}
        return self._last


__all__ = ["FULL_EVERY", "TcpScanner", "TcpSocket", "accepted_connections", "socket_inodes", "tcp_sockets"]

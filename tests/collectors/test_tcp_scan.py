"""The process collector's TCP scan (collectors/tcp_scan.py) on real servers: it finds the
target's listening ports and the connections it accepted, as psutil's net_connections does."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from diagnose.collectors.tcp_scan import (
    FULL_EVERY,
    LISTEN,
    TcpScanner,
    accepted_connections,
    socket_inodes,
    tcp_sockets,
)

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"

# Listens on ``host``, accepts ``n`` clients of its own and ``n`` of the test, says so, then goes
# on accepting (and holding, never reading) until stdin closes.
SERVER = """
import socket, sys, threading
host, n = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
srv = socket.socket(fam)
srv.bind((host, 0))
srv.listen(16)
own = [socket.create_connection((host, srv.getsockname()[1])) for _ in range(n)]
print(srv.getsockname()[1], flush=True)
held = [srv.accept()[0] for _ in range(2 * n)]
print("ACCEPTED", flush=True)
threading.Thread(target=lambda: [held.append(srv.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
sys.stdin.read()
"""


@pytest.fixture()
def server(request: pytest.FixtureRequest) -> Iterator[tuple[int, int, list[socket.socket]]]:
    host, n = request.param
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6")
    p = subprocess.Popen([sys.executable, "-c", SERVER, host, str(n)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.strip().isdigit():
            pytest.skip(f"cannot listen on {host}")
        port = int(line)
        clients = [socket.create_connection((host, port)) for _ in range(n)]
        assert p.stdout.readline().strip() == "ACCEPTED"
        yield p.pid, port, clients
        for c in clients:
            c.close()
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("server", [("127.0.0.1", 3), ("::1", 2)], indirect=True)
def test_the_scan_finds_the_listening_port_and_the_accepted_connections(server):
    pid, port, clients = server
    socks = tcp_sockets(pid)
    tcp = accepted_connections(socks)
    n = len(clients)
    # its own n clients count as accepted too: both ends are the target's, the server end on the port
    assert tcp == {"listening_ports": [port], "accepted": 2 * n}
    assert len(socks) == 1 + 2 * n + n  # the listener, 2n accepted, its own n client ends
    assert [s.local_port for s in socks if s.state == LISTEN] == [port]


@pytest.mark.parametrize("server", [("127.0.0.1", 2)], indirect=True)
def test_the_scan_agrees_with_psutil(server):
    pid = server[0]
    ref = psutil.Process(pid).net_connections(kind="tcp")
    socks = tcp_sockets(pid)
    assert len(socks) == len(ref)
    listening = {c.laddr.port for c in ref if c.status == psutil.CONN_LISTEN}
    accepted = sum(1 for c in ref if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.laddr.port in listening)
    assert accepted_connections(socks) == {"listening_ports": sorted(listening), "accepted": accepted}


def test_a_40_thread_server_with_4_clients():
    p = subprocess.Popen([sys.executable, str(WORKLOADS / "mixed_threads.py"), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        ready, port = p.stdout.readline().split()
        assert ready == "READY"
        assert accepted_connections(tcp_sockets(p.pid)) == {"listening_ports": [int(port)], "accepted": 4}
    finally:
        p.kill()
        p.wait()


def test_a_process_without_sockets_and_a_gone_one():
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert socket_inodes(p.pid) == set() and tcp_sockets(p.pid) == []
    finally:
        p.kill()
        p.wait()
    with pytest.raises(psutil.NoSuchProcess):
        tcp_sockets(p.pid)


def _until(scanner: TcpScanner, accepted: int) -> dict[str, object]:
    deadline = time.monotonic() + 30  # the server's accept thread has to run: a wait, not a timing
    while (got := scanner.read())["tcp"]["accepted"] != accepted and time.monotonic() < deadline:  # type: ignore[index]
        time.sleep(0.05)
    return got


@pytest.mark.parametrize("server", [("127.0.0.1", 1)], indirect=True)
def test_the_scanner_reads_the_tables_again_when_the_sockets_change(server):
    pid, port, clients = server
    scanner = TcpScanner(pid)
    assert scanner.read() == {"connections": 4, "tcp": {"listening_ports": [port], "accepted": 2}}
    assert scanner.read()["connections"] == 4 and (scanner.full_scans, scanner.repeated) == (1, 1)
    clients.append(socket.create_connection(("127.0.0.1", port)))  # a new connection: a new inode
    assert _until(scanner, 3)["connections"] == 5
    assert scanner.full_scans >= 2
    # the peer closes; the target holds its end (CLOSE_WAIT) under the same inode: only the
    # periodic full read sees it, at most FULL_EVERY scans later
    clients.pop().close()
    states = [scanner.read()["tcp"]["accepted"] for _ in range(FULL_EVERY)]  # type: ignore[index]
    assert states[-1] == 2 and set(states) <= {2, 3}


def test_a_target_in_its_own_network_namespace_is_read_in_it():
    """A container's service: its sockets are in its namespace's tables, not in diagnose's (psutil
    reads /proc/net/tcp, diagnose's own namespace, and finds none of them)."""
    if subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unshare -n is not allowed here (needs root or user namespaces)")
    # loopback is down in a fresh namespace: bring it up, then serve and connect inside it
    script = ("import socket, sys; srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(4); "
              "c = socket.create_connection(srv.getsockname()); a = srv.accept(); "
              "print(srv.getsockname()[1], flush=True); sys.stdin.read()")
    shell = f"ip link set lo up 2>/dev/null || true; exec {sys.executable} -c \"{script}\""
    p = subprocess.Popen(["unshare", "-n", "sh", "-c", shell], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)  # unshare and sh exec: the server is p.pid
    try:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if not line.isdigit():
            pytest.skip("no loopback in the new namespace")
        assert accepted_connections(tcp_sockets(p.pid)) == {"listening_ports": [int(line)], "accepted": 1}
        assert psutil.Process(p.pid).net_connections(kind="tcp") == []  # what psutil saw from here
    finally:
        p.kill()
        p.wait()

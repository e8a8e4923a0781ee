"""A 40-thread Python target of mixed work (benchmarks/own_cpu.py, tests/collectors): a TCP echo
server on 127.0.0.1 with CLIENTS connected clients talking every 50 ms (an accept thread, one
handler and one client thread each), BUSY threads alternating 3 ms json bursts and 47 ms sleeps, and
sleepers parked on an event, main included 40 threads. Prints ``READY <port>`` once listening and
connected. Bounded: LIFETIME_S (or argv[1]) seconds."""
import json
import socket
import sys
import threading
import time

LIFETIME_S = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
CLIENTS = 4
BUSY = 10
THREADS = 40


def serve(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)


def accept(srv: socket.socket) -> None:
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), name="handler", daemon=True).start()


def client(port: int, connected: threading.Barrier) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        connected.wait()
        while True:
            s.sendall(b"ping" * 64)
            s.recv(4096)
            time.sleep(0.05)


def busy() -> None:
    while True:
        t_end = time.monotonic() + 0.003
        while time.monotonic() < t_end:
            json.dumps({"x": list(range(500))})
        time.sleep(0.047)


if __name__ == "__main__":
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    threading.Thread(target=accept, args=(srv,), name="acceptor", daemon=True).start()
    connected = threading.Barrier(CLIENTS + 1)
    for _ in range(CLIENTS):
        threading.Thread(target=client, args=(port, connected), name="client", daemon=True).start()
    connected.wait()
    while sum(t.name == "handler" for t in threading.enumerate()) < CLIENTS:
        time.sleep(0.01)
    for _ in range(BUSY):
        threading.Thread(target=busy, name="busy", daemon=True).start()
    parked = threading.Event()
    while threading.active_count() < THREADS:
        threading.Thread(target=parked.wait, args=(LIFETIME_S,), name="sleeper", daemon=True).start()
    print("READY", port, flush=True)
    time.sleep(LIFETIME_S)

"""A target that opens many listening sockets named like diagnose's agent socket and never answers
on any of them (accepts and holds each connection). argv: DIR COUNT. Prints READY."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time

base, count = sys.argv[1], int(sys.argv[2])
held: list[socket.socket] = []


def serve(sock: socket.socket) -> None:
    while True:
        conn, _ = sock.accept()
        held.append(conn)  # read nothing, answer nothing


for i in range(count):
    d = os.path.join(base, str(i))
    os.makedirs(d, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(d, f"agent-{os.getpid()}.sock"))
    s.listen(16)
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("READY", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.1)

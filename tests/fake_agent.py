"""A fake agent for tests: a Unix socket that answers each request with whatever bytes it is given."""
from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from pathlib import Path

from diagnose.agent.inproc import protocol


class FakeAgent:
    """A Unix socket that answers each connection's request with the next reply it is given."""

    def __init__(self, reply: bytes = b""):
        self.directory = Path(tempfile.mkdtemp(prefix="dfa-", dir="/tmp"))  # AF_UNIX paths: <= 107 bytes
        self.path = str(self.directory / "agent-4242.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.reply = reply
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(2)
                    protocol.read_message(conn, 2.0)
                    conn.sendall(self.reply)
                except (OSError, protocol.ProtocolError):
                    continue

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)
        shutil.rmtree(self.directory)

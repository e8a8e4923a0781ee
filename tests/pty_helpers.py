"""Run a command on a real pseudo-terminal (as a user's terminal would) and read what it draws."""
from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

_ESC = re.compile(rb"\x1b(\[[0-9;?<>=$]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


class PtyRun:
    """``python -m diagnose ARGS`` with stdin/stdout/stderr on a pty of ``cols`` x ``rows``."""

    def __init__(self, *args: str, cols: int = 80, rows: int = 24, term: str = "xterm-256color",
                 cwd: str | None = None):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": term, "COLUMNS": str(cols), "LINES": str(rows)}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "diagnose", *args], stdin=slave,
                                     stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True,
                                     start_new_session=True)
        os.close(slave)
        self.raw = b""

    def hangup(self) -> None:
        """Close the terminal (as closing its window does) without sending any signal."""
        os.close(self.master)
        self.master = -1

    def _pump(self, timeout_s: float) -> None:
        if self.master < 0:
            time.sleep(timeout_s)
            return
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if ready:
            try:
                self.raw += os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the terminal
                time.sleep(timeout_s)

    @property
    def text(self) -> str:
        """Everything drawn so far with the escape sequences removed."""
        return _ESC.sub(b"", self.raw).decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.text:
                return True
            if self.proc.poll() is not None:
                self._pump(0.1)
                return needle in self.text
            self._pump(0.2)
        return needle in self.text

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self, timeout_s: float = 30) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._pump(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait(10)
        self._pump(0.1)
        if self.master >= 0:
            os.close(self.master)
        return code

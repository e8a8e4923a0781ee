"""Start the demo service and its load generator as child processes; always shut both down."""
from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

STARTUP_TIMEOUT_S = 30.0
WARMUP_S = 1.5


class DemoError(Exception):
    """The demo service could not start."""


@dataclass
class DemoService:
    pid: int
    url: str
    _load: subprocess.Popen

    def stats(self) -> str:
        """Stop the load generator and return its one-line JSON summary."""
        if self._load.poll() is None:
            self._load.terminate()
        try:
            out, _ = self._load.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self._load.kill()
            return "load generator did not stop"
        lines = [ln for ln in (out or "").splitlines() if ln.startswith("{")]
        return lines[-1] if lines else "no stats"


def _read_port(proc: subprocess.Popen[str], errlog: IO[str]) -> int:
    stdout = proc.stdout
    if stdout is None:  # started without stdout=PIPE
        raise DemoError("demo service has no stdout pipe to announce its port on")
    sel = selectors.DefaultSelector()
    sel.register(stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            errlog.seek(0)
            tail = errlog.read()[-300:].strip().replace("\n", " | ")
            raise DemoError(f"demo service exited with code {proc.returncode}: {tail}")
        if sel.select(timeout=0.2):
            line = stdout.readline()
            if line.startswith("LISTENING "):
                return int(line.split()[1])
    raise DemoError(f"demo service did not start within {STARTUP_TIMEOUT_S:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _service_env() -> dict[str, str]:
    # One BLAS thread, as most production servers configure it; spinning BLAS pools would
    # otherwise fight the load generator for this machine's cores.
    env = dict(os.environ)
    env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


@contextmanager
def running_demo(clients: int = 4) -> Iterator[DemoService]:
    errlog = tempfile.TemporaryFile(mode="w+")  # a pipe could fill up and block the service
    service = subprocess.Popen(
        [sys.executable, "-m", "diagnose.demo.service", "--port", "0"],
        stdout=subprocess.PIPE, stderr=errlog, text=True, env=_service_env(),
    )
    load = None
    try:
        url = f"http://127.0.0.1:{_read_port(service, errlog)}"
        load = subprocess.Popen(
            [sys.executable, "-m", "diagnose.demo.loadgen", "--url", url, "--clients", str(clients)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        time.sleep(WARMUP_S)
        yield DemoService(service.pid, url, load)
    finally:
        if load is not None:
            _stop(load)
        _stop(service)
        errlog.close()

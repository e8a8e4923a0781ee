"""Start a demo scenario's processes and always stop them: the service under the diagnose agent (as
``diagnose run`` starts a command), its slow upstream (io scenario) and the open-loop load generator.

``running_demo`` yields a ``DemoRun`` once the service listens, its agent answers, its capacity is
measured (unless a rate is given: ``capacity_qps``) and the load has warmed it up; ``DemoRun.stop``
(called when the capture's collection ends, and again on the way out) sends SIGTERM to every child
at once and kills what is still there after STOP_GRACE_S, so all of them are gone within about that
long. The load generator's last stdout line is its client-side summary.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from diagnose.demo.scenarios import MAX_QPS, REMEDIES, SCENARIOS, Scenario, remedied

STARTUP_TIMEOUT_S = 60.0
WARMUP_S = 1.5
STOP_GRACE_S = 1.5  # SIGTERM, then SIGKILL: every child gone within this (plus a reap)
PROBE_OFFER_QPS = 2000.0  # far past any scenario's capacity: the connections, all busy, bound what is in flight
PROBE_S = 2.0  # the measured part of the capacity probe
PROBE_WARMUP_S = 1.0  # the first requests of a fresh service are slow (allocations, first batches)


class DemoError(Exception):
    """The demo could not start: the message names the cause and the fix."""


@dataclass
class DemoRun:
    """The running demo: the service's pid and URL; ``stop()`` ends every child (idempotent)."""

    scenario: str
    pid: int
    url: str
    children: list[subprocess.Popen] = field(default_factory=list)
    load: subprocess.Popen | None = None
    capacity_qps: float | None = None  # measured before the capture (None: the caller gave the rate)
    load_factor: float | None = None  # the scenario's offered rate as a multiple of that capacity
    stopped_in_s: float | None = None  # how long stop() took to see every child gone
    _load_out: str = ""

    def stop(self) -> None:
        if self.stopped_in_s is not None:
            return
        t0 = time.monotonic()
        live = [p for p in self.children if p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = t0 + STOP_GRACE_S
        if self.load is not None:
            try:
                self._load_out, _ = self.load.communicate(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.load.kill()
                self._load_out, _ = self.load.communicate()
        for p in live:
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.stopped_in_s = time.monotonic() - t0

    def load_stats(self) -> dict[str, Any] | None:
        """The load generator's summary (diagnose/demo/load.py), or None when it printed none."""
        for line in reversed((self._load_out or "").splitlines()):
            if line.startswith("{"):
                try:
                    doc = json.loads(line)
                except ValueError:
                    return None
                return doc if isinstance(doc, dict) else None
        return None


def _read_port(proc: subprocess.Popen, errlog: IO[str], what: str) -> int:
    stdout = proc.stdout
    if stdout is None:  # started without stdout=PIPE
        raise DemoError(f"the demo {what} has no stdout pipe to announce its port on")
    sel = selectors.DefaultSelector()
    sel.register(stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            errlog.seek(0)
            tail = errlog.read()[-300:].strip().replace("\n", " | ")
            hint = " (install the demo extra: pip install 'diagnose[demo]')" if "ModuleNotFoundError" in tail else ""
            raise DemoError(f"the demo {what} exited with code {proc.returncode}: {tail}{hint}")
        if sel.select(timeout=0.2):
            line = stdout.readline()
            if line.startswith("LISTENING "):
                return int(line.split()[1])
    raise DemoError(f"the demo {what} did not start within {STARTUP_TIMEOUT_S:.0f} s; "
                    "is the machine overloaded?")


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def _wait_agent(proc: subprocess.Popen) -> None:
    from diagnose.agent.host.run import wait_ready

    wait_ready(proc, 0.0)  # says in one line when no agent comes up; the capture goes on without it
    if proc.poll() is not None:
        raise DemoError(f"the demo service exited with code {proc.returncode} before its agent answered")


def _check_dependencies() -> None:
    import importlib.util

    missing = [m for m in ("torch", "aiohttp") if importlib.util.find_spec(m) is None]
    if missing:
        raise DemoError(f"the demo needs {' and '.join(missing)}: pip install 'diagnose[demo]'")


def measure_capacity(url: str, scenario: str, connections: int, service: subprocess.Popen | None = None) -> float:
    """Requests/s the service completes with ``connections`` clients, each sending as soon as it is
    answered: an open loop offered PROBE_OFFER_QPS for PROBE_WARMUP_S + PROBE_S (diagnose/demo/openloop.py;
    the warm-up's requests are not counted), so at most PROBE_OFFER_QPS. Raises DemoError when it
    completes none (naming the exit code of ``service`` when that process ended)."""
    from diagnose.demo.bodies import request_body
    from diagnose.demo.openloop import run_open_loop

    r = run_open_loop(url, PROBE_OFFER_QPS, PROBE_S, warmup_s=PROBE_WARMUP_S, drain_s=0.0,
                      body=request_body(scenario), connections=connections)
    if not r.achieved_qps > 0 and service is not None and service.poll() is not None:
        raise DemoError(f"the demo service exited with code {service.returncode} while its capacity was measured")
    if not r.achieved_qps > 0:
        raise DemoError(f"the demo service answered no request while its capacity was measured "
                        f"({r.errors} errors: {r.first_error}); is the machine overloaded?")
    return r.achieved_qps


def _serve(sc: Scenario, remedy: bool, extra: list[str], errlog: IO[str]) -> tuple[subprocess.Popen, str]:
    """The scenario's service under the agent, once it listens and its agent answered: (process, URL)."""
    from diagnose.agent.host.run import agent_env

    service = subprocess.Popen([sys.executable, "-m", "diagnose.demo.server", "--scenario", sc.name, "--port", "0",
                                *extra, *(["--remedy"] if remedy else [])],
                               stdout=subprocess.PIPE, stderr=errlog, text=True,
                               env=agent_env(_env(sc.torch_threads)))
    try:
        port = _read_port(service, errlog, "service")
        _wait_agent(service)
    except BaseException:
        service.kill()
        service.wait()
        raise
    return service, f"http://127.0.0.1:{port}/" + ("generate" if sc.stream else "predict")


def _upstream(sc: Scenario, errlog: IO[str], run: DemoRun) -> list[str]:
    """The io scenario's slow upstream, started as a child of ``run``: the service's arguments naming it."""
    if not sc.upstream:
        return []
    up = subprocess.Popen([sys.executable, "-m", "diagnose.demo.upstream", "--port", "0",
                           "--latency-ms", f"{sc.upstream_latency_ms:g}"], stdout=subprocess.PIPE,
                          stderr=errlog, text=True, env=_env(1))
    run.children.append(up)
    return ["--upstream", f"http://127.0.0.1:{_read_port(up, errlog, 'upstream')}/lookup"]


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL after STOP_GRACE_S."""
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def running_demo(scenario: str, qps: float | None = None, remedy: bool = False) -> Iterator[DemoRun]:
    """Start ``scenario`` (diagnose/demo/scenarios.py), with its first remedy applied when ``remedy``,
    and offer it ``qps``, or by default the scenario's ``load`` times its capacity measured first
    (``measure_capacity``; with ``remedy``, the plain service's and its own upstream's, started for
    the probe alone, so a plain run and its remedy get the same load); stop every child on the way
    out. Raises DemoError when a part cannot start (the demo extra not installed, a child that exits)
    or the scenario has no remedy."""
    if remedy and scenario not in REMEDIES:
        raise DemoError(f"scenario {scenario} has no --remedy: give one of {', '.join(sorted(REMEDIES))}")
    plain = SCENARIOS[scenario]
    sc = remedied(plain) if remedy else plain
    _check_dependencies()
    errlog = tempfile.TemporaryFile(mode="w+")  # a pipe could fill up and block a child
    py = sys.executable
    run = DemoRun(scenario, 0, "")
    try:
        if qps is None and remedy:  # the plain system's capacity (its own upstream too), then the fixed one
            first = len(run.children)
            probe, url = _serve(plain, False, _upstream(plain, errlog, run), errlog)
            run.children.append(probe)
            try:
                run.capacity_qps = measure_capacity(url, plain.name, plain.connections, probe)
            finally:
                for p in run.children[first:]:
                    _end(p)
                del run.children[first:]
        service, run.url = _serve(sc, remedy, _upstream(sc, errlog, run), errlog)
        run.children.append(service)
        run.pid = service.pid
        if qps is None:
            if run.capacity_qps is None:
                run.capacity_qps = measure_capacity(run.url, sc.name, sc.connections, service)
            qps = max(0.1, min(MAX_QPS, plain.load * run.capacity_qps))
            run.load_factor = qps / run.capacity_qps  # the scenario's load, unless the bounds cut it
        run.load = subprocess.Popen([py, "-m", "diagnose.demo.load", "--url", run.url, "--scenario", sc.name,
                                     "--qps", f"{qps:.6g}"], stdout=subprocess.PIPE, stderr=errlog, text=True,
                                    env=_env(1))
        run.children.append(run.load)
        time.sleep(WARMUP_S)
        if run.load.poll() is not None:
            errlog.seek(0)
            raise DemoError(f"the demo load generator exited with code {run.load.returncode}: "
                            f"{errlog.read()[-300:].strip()}")
        yield run
    finally:
        run.stop()
        errlog.close()


__all__ = ["DemoError", "DemoRun", "STOP_GRACE_S", "measure_capacity", "running_demo"]

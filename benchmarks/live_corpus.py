"""The live corpus of benchmarks/accuracy.py (``--live``): the project's own workloads
(tests/workloads/), each started, driven where it needs a driver, attached for a few seconds and
judged on quadrant, layer and first remedy. The expected answers live here only.

A host that starves the target of cores is read as such (layer system) and counted right when the
verdict's own reading on dedicated cores (findings.json verdict.dedicated) is the expected one.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from diagnose.rules import RULES

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = REPO / "tests" / "workloads"
FIRST = {r.id: r.suggestions[0] for r in RULES}
TRAINING_FIRST = {r.id: (r.training_suggestions or r.suggestions)[0] for r in RULES}

# case -> (workload argv, attach options, needs a line upstream + clients, (quadrant, layer, first remedy
# or remedies, any one of them right))
Expected = tuple[str, str | None, str | tuple[str, ...]]
LIVE: dict[str, tuple[list[str], list[str], bool, Expected]] = {
    "train_dataloader": (["train_dataloader.py", "--seconds", "90"], [], False,
                         ("service", "service", FIRST["service.input_pipeline"])),
    "async_blocking": (["async_upstream.py", "{upstream}", "--blocking", "--max-s", "90"], [], True,
                       ("service", "service", FIRST["service.loop_blocked"])),
    "threaded_preprocess": (["preprocess_service.py", "--clients", "6", "--max-s", "90"], [], False,
                            ("service", "service", FIRST["service.preprocessing"])),
    # GIL waits and the serialization that holds the GIL lead it in turns (31-45% against 23-37% of the
    # thread-time): more processes and a faster encoder are both its first remedy
    "json_thread_per_request": (["json_thread_per_request.py", "--clients", "8", "--max-s", "90"], [], False,
                                ("service", "service", (FIRST["service.gil_bound"], FIRST["service.serialization"]))),
    "blas_threads": (["blas_service.py", "--clients", "4", "--max-s", "90"], [], False,
                     ("compute", "model", FIRST["compute.cpu_native_threads"])),
    "batched_near_idle": (["batched_service.py", "--load-qps", "30", "--max-s", "90"], [], False,
                          ("no_load", None, FIRST["secondary.idle_target"])),
    "forked_workers": (["forking_workers.py"], ["--subprocesses"], False,
                       ("compute", "model", FIRST["compute.cpu_framework"])),
}


@contextmanager
def line_upstream(delay_s: float = 0.03) -> Iterator[str]:
    """A slow upstream speaking one line per connection: answers ``delay_s`` after the question."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            if conn.makefile("rb").readline():
                time.sleep(delay_s)
                conn.sendall(b"ok\n")

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        srv.close()


@contextmanager
def line_clients(port: int, n: int = 8) -> Iterator[None]:
    """``n`` closed-loop clients of a line protocol, one connection each (this process's threads)."""
    stop = threading.Event()

    def client() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.settimeout(30)
                f = s.makefile("rb")
                while not stop.is_set():
                    s.sendall(b"q\n")
                    if not f.readline():
                        return
        except OSError:  # the workload stopped (or reset the connection): so does its client
            return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(35)


def start(argv: list[str]) -> tuple[subprocess.Popen, str]:
    """A workload started and READY (its ready line)."""
    proc = subprocess.Popen([sys.executable, str(WORKLOADS / argv[0]), *argv[1:]], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{argv[0]} did not start: {line!r}")
    time.sleep(1.0)  # past its start-up (imports, first steps)
    return proc, line


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(10)


def judge(doc: dict, expected: Expected) -> dict:
    """Quadrant, layer and first remedy against the expected ones; a starved host's dedicated reading."""
    v = doc["verdict"]
    own = v.get("dedicated")
    starved = own is not None and v["layer"] == "system"
    remedies = expected[2] if isinstance(expected[2], tuple) else (expected[2],)

    def right(quadrant: str, layer: str | None, remedy: str | None) -> bool:
        return (quadrant, layer) == expected[:2] and remedy in remedies

    correct = right(v["quadrant"], v["layer"], v.get("remedy")) or (
        starved and right(own["quadrant"], own["layer"], own["remedy"]))
    return {"quadrant": v["quadrant"], "layer": v["layer"], "remedy": v.get("remedy"), "confidence": v["confidence"],
            "headline": v["headline"], "starved": starved, "dedicated": own, "correct": correct,
            "lead": (doc["account"][0]["terms"][0]["kind"] if doc["account"] and doc["account"][0]["terms"] else None)}


def run_live(name: str, duration: float, keep: Path | None = None) -> dict:
    argv, extra, driven, expected = LIVE[name]
    row: dict = {"scenario": name, "expected": expected}
    with ExitStack() as stack:
        upstream = stack.enter_context(line_upstream()) if driven else ""
        proc, ready = start([a.format(upstream=upstream) for a in argv])
        try:
            if driven:
                stack.enter_context(line_clients(int(ready.split()[1])))
                time.sleep(0.5)
            out = keep / name if keep else Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix=f"live-{name}-")))
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            res = subprocess.run([str(Path(sys.executable).parent / "diagnose"), "attach", str(proc.pid), "--duration",
                                  f"{duration:g}", "--no-tui", "--out", str(out), *extra],
                                 capture_output=True, text=True, timeout=duration + 240)
            row["wall_s"] = round(time.monotonic() - t0, 1)
        finally:
            stop(proc)
        bundles = sorted(out.glob("diagnose-*"))
        if res.returncode != 0 or not bundles:
            row["error"] = (res.stderr or res.stdout)[-400:]
            return row
        row.update(judge(json.loads((bundles[-1] / "findings.json").read_text()), expected))
    return row


__all__ = ["LIVE", "judge", "line_clients", "line_upstream", "run_live", "start", "stop"]

"""Plain helpers for tests (tests/ is on pytest's pythonpath)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
REPO = HERE.parent
SHARED_DATA = REPO.parent / "shared" / "data"


# Commands that only read and write files: run in pytest's own process (~0.05 s instead of ~1-4 s
# of a fresh interpreter). Capturing ones (attach, run, demo, sweep, tui) start a process of their
# own: they install signal handlers, set the umask and start py-spy.
IN_PROCESS = frozenset({"analyze", "report", "compare", "plan", "rules", "explain", "baseline"})


def run_diagnose(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``diagnose ARGS``: its exit code and output as a CompletedProcess. ``env``: variables set
    for the run (in-process: in os.environ, restored afterwards)."""
    if args and args[0] in IN_PROCESS:
        return run_in_process(*args, env=env)
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *args], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def run_in_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI's ``invoke`` in this process, its standard streams captured (click's test isolation),
    the signal handlers it may change put back."""
    import signal

    from click.testing import CliRunner

    from diagnose.cli import invoke

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with CliRunner().isolation(env=env) as (out, err, _):
            code = invoke(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
            stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    return subprocess.CompletedProcess(["diagnose", *args], code, stdout.decode("utf-8", "replace"),
                                       stderr.decode("utf-8", "replace"))


def wait_for_capture(out: Path, proc: subprocess.Popen, windows: int = 0, timeout_s: float = 90) -> Path:
    """Wait until `diagnose attach --out OUT` is sampling (its bundle has a pyspy/ directory) and,
    with ``windows``, until that many py-spy windows are finished (indexed in pyspy.jsonl)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        found = [p for p in out.iterdir() if p.name.startswith("diagnose-")] if out.is_dir() else []
        if found and (found[0] / "pyspy").is_dir():
            index = found[0] / "pyspy.jsonl"
            done = len(index.read_text().splitlines()) if index.is_file() else 0
            if done >= windows:
                return found[0]
        assert proc.poll() is None, f"attach exited early ({proc.returncode})"
        assert time.monotonic() < deadline, f"attach not sampling after {timeout_s} s"
        time.sleep(0.1)


def only_bundle(out: Path) -> Path:
    bundles = [p for p in out.iterdir() if p.name.startswith("diagnose-")]
    assert len(bundles) == 1, bundles
    return bundles[0]


def findings(bundle: Path) -> dict:
    return json.loads((bundle / "findings.json").read_text())


def is_report(md: str) -> bool:
    """A diagnose report.md: its first line is the verdict and the target (a ticket title)."""
    first = md.lstrip().split("\n", 1)[0]
    return first.startswith("# ") and ": " in first and "## Where the time went" in md


def gfm_html(md: str) -> str:
    """``md`` rendered by GitHub's own renderer (cmark-gfm, with its table/strikethrough/autolink
    extensions and raw HTML allowed, as a hostile reading would have it)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


def gfm_text(md: str) -> str:
    """The text a reader sees once ``md`` is rendered: tags dropped, entities decoded."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", gfm_html(md)))


NOBODY = 65534


class AsUid:
    """``with AsUid(uid, action) as pid:`` runs ``action()`` in a forked child that dropped to ``uid``
    (another local user: a squatter) and keeps that child, and whatever it holds, alive until the
    block ends. Needs root."""

    def __init__(self, uid: int, action):
        self.uid, self.action = uid, action
        self.pid = 0

    def __enter__(self) -> int:
        ready_r, ready_w = os.pipe()
        self._hold_r, self._hold_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # child: never returns into pytest
            code = 1
            try:
                os.close(ready_r)
                os.close(self._hold_w)
                os.setgroups([])
                os.setgid(self.uid)
                os.setuid(self.uid)
                kept = self.action()  # noqa: F841 - held (a socket) until the parent lets go
                os.write(ready_w, b"ok")
                os.read(self._hold_r, 1)
                code = 0
            except BaseException as exc:
                os.write(ready_w, repr(exc).encode()[:500])
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(self._hold_r)
        said = os.read(ready_r, 600)  # one write: "ok" or the child's error
        os.close(ready_r)
        if said != b"ok":
            self.__exit__()
            raise AssertionError(f"uid {self.uid} child failed: {said!r}")
        return self.pid

    def __exit__(self, *exc: object) -> None:
        os.close(self._hold_w)
        os.waitpid(self.pid, 0)


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real threaded HTTP server on 127.0.0.1 (an ephemeral port) serving ``handler`` from a daemon
    thread; yields its base URL, shuts it down on the way out."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()

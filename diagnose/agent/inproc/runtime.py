"""The agent in the target process: one control socket, at most one capture at a time.

``start()`` is idempotent per process. After ``os.fork()`` the child drops the parent's socket and
capture (``os.register_at_fork``) and, unless ``follow_forks`` is off, starts its own agent on a
socket named by its own pid, so each worker of a pre-fork server can be captured by its pid.
"""
from __future__ import annotations

import atexit
import importlib.metadata
import itertools
import os
import platform
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnose.agent.inproc import protocol, providerwatch, spans
from diagnose.agent.inproc.bridge import Bridge, load_nvtx
from diagnose.agent.inproc.capture import MAX_CAPTURE_S, CaptureRequest, CaptureSession
from diagnose.agent.inproc.server import AgentServer
from diagnose.agent.inproc.torchwin import MAX_WINDOW_S

ENV_AGENT = "DIAGNOSE_AGENT"
ENV_NVTX = "DIAGNOSE_AGENT_NVTX"
ENV_FORKS = "DIAGNOSE_AGENT_FORKS"
_TRUE = ("1", "true", "yes", "on")


class AgentError(Exception):
    """The agent cannot start (runtime directory unusable, socket cannot be bound)."""


@dataclass(frozen=True)
class AgentOptions:
    nvtx: bool = False
    follow_forks: bool = True


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class Agent:
    def __init__(self, options: AgentOptions):
        from diagnose.agent.inproc.rundir import RuntimeDirError, runtime_dir

        self.options = options
        self.nvtx_reason: str | None = None
        nvtx_module = None
        if options.nvtx:
            nvtx_module, self.nvtx_reason = load_nvtx()
        self.bridge = Bridge(nvtx_module)
        spans.HOOKS.bridge = self.bridge
        try:
            directory = runtime_dir()
        except (OSError, RuntimeDirError) as exc:
            raise AgentError(f"no usable runtime directory: {exc}") from None
        self.server = AgentServer(directory, self.dispatch)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.session: CaptureSession | None = None

    def start(self) -> Path:
        try:
            path = self.server.start()
        except OSError as exc:
            raise AgentError(f"cannot listen on {self.server.path}: {exc}") from None
        if self.options.nvtx:
            providerwatch.PROVIDER_WATCH.install()
            spans.attach()
        return path

    def dispatch(self, request: protocol.Request, peer: dict[str, int]) -> dict[str, Any]:
        return HANDLERS[request.op](self, request.args, peer)

    def hello(self, args: dict[str, Any], peer: dict[str, int]) -> dict[str, Any]:
        from diagnose import __version__

        torch_mod = sys.modules.get("torch")
        return protocol.ok(
            pid=os.getpid(), uid=os.getuid(), agent_version=__version__,
            protocol=protocol.PROTOCOL_VERSION, python=platform.python_version(),
            executable=sys.executable,
            torch=str(torch_mod.__version__) if torch_mod is not None else None,
            opentelemetry=_dist_version("opentelemetry-api") if "opentelemetry.trace" in sys.modules else None,
            capabilities=self._capabilities(), capturing=self.session is not None and self.session.running,
            spans_attached=spans.is_attached(),
            max_capture_s=MAX_CAPTURE_S, max_torch_window_s=MAX_WINDOW_S,
        )

    def _capabilities(self) -> list[str]:
        caps = ["gc", "spans"]
        if "torch" in sys.modules:
            caps += ["torch_profiler", "record_function"]
        if self.bridge.nvtx is not None:
            caps.append("nvtx")
        return caps

    def capture(self, args: dict[str, Any], peer: dict[str, int]) -> dict[str, Any]:
        with self._lock:
            if self.session is not None and self.session.running:
                return protocol.error(protocol.BUSY,
                                      f"a capture is already running in pid {os.getpid()} "
                                      f"(capture {self.session.capture_id}); wait for it to end or stop it")
            request = CaptureRequest.from_args(args)
            out_dir, note = self._output_dir(request.out_dir)
            session = CaptureSession(next(self._ids), request, out_dir, self.bridge)
            session.start()
            self.session = session
        return protocol.ok(**session.report(), note=note)

    def _output_dir(self, requested: Path) -> tuple[Path, str | None]:
        """The bundle itself when this process may write there, else a private staging directory
        the client collects from (a target running as another user than diagnose)."""
        try:
            if requested.is_dir() and os.access(requested, os.W_OK | os.X_OK):
                return requested, None
        except OSError:  # e.g. a parent directory this uid may not search
            pass
        staging = self.server.directory / f"capture-{os.getpid()}-{next(self._ids)}"
        staging.mkdir(mode=0o700)
        return staging, f"{requested} is not writable by uid {os.getuid()}: staged in {staging}"

    def status(self, args: dict[str, Any], peer: dict[str, int]) -> dict[str, Any]:
        session = self.session
        if session is None:
            return protocol.ok(state="idle", report=None)
        return protocol.ok(state="capturing" if session.running else "done", report=session.report())

    def stop(self, args: dict[str, Any], peer: dict[str, int]) -> dict[str, Any]:
        session = self.session
        if session is not None:
            session.request_stop()
        return self.status(args, peer)

    def close(self) -> None:
        if self.session is not None and self.session.running:
            self.session.request_stop()
            self.session.wait(5.0)
        self.server.close()

    def forget_after_fork(self) -> None:
        if self.session is not None:
            self.session.abandon()
        self.bridge.reset()
        self.server.forget()


HANDLERS: dict[str, Callable[[Agent, dict[str, Any], dict[str, int]], dict[str, Any]]] = {
    "hello": Agent.hello,
    "capture": Agent.capture,
    "status": Agent.status,
    "stop": Agent.stop,
}

_agent: Agent | None = None
_lock = threading.Lock()
_hooks_registered = False


def start(nvtx: bool = False, follow_forks: bool = True) -> Path:
    """Start the agent in this process (idempotent). Returns its socket path. Raises AgentError."""
    global _agent, _hooks_registered
    with _lock:
        if _agent is not None:
            return _agent.server.path
        agent = Agent(AgentOptions(nvtx=nvtx, follow_forks=follow_forks))
        path = agent.start()
        _agent = agent
        if not _hooks_registered:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            atexit.register(stop)
            _hooks_registered = True
    return path


def start_from_env() -> Path:
    """start() with options from DIAGNOSE_AGENT_NVTX and DIAGNOSE_AGENT_FORKS."""
    return start(nvtx=os.environ.get(ENV_NVTX, "").strip().lower() in _TRUE,
                 follow_forks=os.environ.get(ENV_FORKS, "1").strip().lower() in _TRUE)


def stop() -> None:
    """Stop the agent of this process: end a running capture, close and unlink the socket."""
    global _agent
    with _lock:
        agent, _agent = _agent, None
    if agent is not None:
        agent.close()


def running() -> Path | None:
    return _agent.server.path if _agent is not None else None


def _after_fork_in_child() -> None:
    global _agent, _lock
    _lock = threading.Lock()  # the parent's lock may have been held by another thread at fork time
    agent, _agent = _agent, None
    if agent is None:
        return
    agent.forget_after_fork()
    if agent.options.follow_forks:
        try:
            start(nvtx=agent.options.nvtx, follow_forks=True)
        except AgentError as exc:
            sys.stderr.write(f"diagnose: agent not started in forked child {os.getpid()}: {exc}\n")

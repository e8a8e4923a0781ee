"""diagnose doctor: what this host offers, each problem with its fix. Reads only, changes nothing."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    level: str  # ok | info (optional, not there or not checked) | warn | fail
    detail: str
    fix: str = ""


def check_pyspy(pid: int | None) -> list[Check]:
    from diagnose.collectors.pyspy import classify_failure, find_pyspy

    binary = find_pyspy()
    if binary is None:
        return [Check("py-spy", "fail", "not found on PATH or beside this Python", "pip install py-spy")]
    try:
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check("py-spy", "fail", f"{binary} does not run: {exc}", "reinstall: pip install -U py-spy")]
    out = [Check("py-spy", "ok", f"{version} at {binary}")]
    out.append(_ptrace_check())
    if pid is not None:
        from diagnose.capture.target import TargetError, resolve_target
        from diagnose.collectors import CaptureOptions
        from diagnose.collectors.pyspy import PySpyCollector

        try:
            probe = PySpyCollector().probe(resolve_target(pid), CaptureOptions())
        except TargetError as exc:
            return out + [Check(f"pid {pid}", "fail", str(exc))]
        out.append(Check(f"py-spy on pid {pid}", "ok" if probe.available else "fail",
                         "readable" if probe.available else (probe.reason or classify_failure("", True))))
    return out


def _ptrace_check() -> Check:
    scope_file = Path("/proc/sys/kernel/yama/ptrace_scope")
    if os.geteuid() == 0:
        if _has_cap_sys_ptrace():
            return Check("ptrace", "ok", "root with CAP_SYS_PTRACE: may attach to any process")
        return Check("ptrace", "warn", "root without CAP_SYS_PTRACE (a container?): attaching to "
                     "processes of other users fails", "add the capability, e.g. --cap-add SYS_PTRACE")
    if not scope_file.exists():
        return Check("ptrace", "ok", "no Yama LSM: may attach to processes of the same user")
    scope = scope_file.read_text().strip()
    if scope == "0":
        return Check("ptrace", "ok", "kernel.yama.ptrace_scope=0: may attach to processes of the same user")
    return Check("ptrace", "warn", f"kernel.yama.ptrace_scope={scope}: attaching needs root or CAP_SYS_PTRACE",
                 "sudo sysctl kernel.yama.ptrace_scope=0, or run diagnose as root")


def _has_cap_sys_ptrace() -> bool:
    """CAP_SYS_PTRACE (bit 19) in this process's effective capability set (/proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 19 & 1)
    except (OSError, ValueError):
        pass
    return False


def check_module(name: str, dist: str, purpose: str, required: bool) -> Check:
    if importlib.util.find_spec(name) is None:
        return Check(name, "fail" if required else "warn", f"not installed ({purpose})", f"pip install {dist}")
    try:
        from importlib.metadata import version
        return Check(name, "ok", f"{version(dist)} ({purpose})")
    except Exception:  # metadata missing for a vendored module: still importable
        return Check(name, "ok", f"importable ({purpose})")


def check_terminal() -> Check:
    tty = sys.stdout.isatty()
    term = os.environ.get("TERM", "")
    if tty and term != "dumb":
        return Check("terminal", "ok", f"TTY, TERM={term}: live progress and TUI available")
    return Check("terminal", "ok", "not a TTY (or TERM=dumb): headless output")


def run_checks(pid: int | None = None, dcgm_url: str | None = None) -> list[Check]:
    from diagnose.doctor.agent import agent_checks  # the in-process agent of --pid
    from diagnose.doctor.gpu import gpu_checks  # NVML, GPM, DCGM

    return [
        *check_pyspy(pid),
        *agent_checks(pid),
        check_module("psutil", "psutil", "process and host metrics", True),
        *gpu_checks(dcgm_url),
        check_module("torch", "torch", "only needed inside the target for kernel timelines", False),
        check_terminal(),
    ]

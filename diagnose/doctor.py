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
    level: str  # ok | warn | fail
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
        from diagnose.collectors import CaptureOptions
        from diagnose.collectors.pyspy import PySpyCollector
        from diagnose.target import TargetError, resolve_target

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
        return Check("ptrace", "ok", "running as root: may attach to any process")
    if not scope_file.exists():
        return Check("ptrace", "ok", "no Yama LSM: may attach to processes of the same user")
    scope = scope_file.read_text().strip()
    if scope == "0":
        return Check("ptrace", "ok", "kernel.yama.ptrace_scope=0: may attach to processes of the same user")
    return Check("ptrace", "warn", f"kernel.yama.ptrace_scope={scope}: attaching needs root or CAP_SYS_PTRACE",
                 "sudo sysctl kernel.yama.ptrace_scope=0, or run diagnose as root")


def check_module(name: str, dist: str, purpose: str, required: bool) -> Check:
    if importlib.util.find_spec(name) is None:
        return Check(name, "fail" if required else "warn", f"not installed ({purpose})", f"pip install {dist}")
    try:
        from importlib.metadata import version
        return Check(name, "ok", f"{version(dist)} ({purpose})")
    except Exception:  # metadata missing for a vendored module: still importable
        return Check(name, "ok", f"importable ({purpose})")


def check_nvml() -> Check:
    if importlib.util.find_spec("pynvml") is None:
        return Check("NVML", "warn", "nvidia-ml-py not installed", "pip install nvidia-ml-py")
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Check("NVML", "warn", f"unavailable: {exc} (no NVIDIA driver/GPU on this host)",
                     "GPU counters will be reported as unknown")
    try:
        n = pynvml.nvmlDeviceGetCount()
        driver = pynvml.nvmlSystemGetDriverVersion()
        return Check("NVML", "ok", f"{n} GPU(s), driver {driver}")
    finally:
        pynvml.nvmlShutdown()


def check_terminal() -> Check:
    tty = sys.stdout.isatty()
    term = os.environ.get("TERM", "")
    if tty and term != "dumb":
        return Check("terminal", "ok", f"TTY, TERM={term}: live progress and TUI available")
    return Check("terminal", "ok", "not a TTY (or TERM=dumb): headless output")


def run_checks(pid: int | None = None) -> list[Check]:
    return [
        *check_pyspy(pid),
        check_module("psutil", "psutil", "process and host metrics", True),
        check_nvml(),
        check_module("torch", "torch", "only needed inside the target for kernel timelines", False),
        check_terminal(),
    ]

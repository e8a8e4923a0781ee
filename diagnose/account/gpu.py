"""GPU-time account from the kernel timeline: busy by kernel group, idle by cause.

Over the kernel window (HTA's temporal breakdown: first to last GPU event), busy time is split by
the kernel groups' shares of GPU event time (catalogs/kernels.py) after the exposed part of the
collectives; idle time is split into kernel-to-kernel gaps shorter than the idle-gap minimum
(launch overhead), host blocked in synchronisations or blocking copies (at most its share of host
time), HTA's host wait (the launch came after the GPU went idle; split by what py-spy saw the
threads do during the gaps: reads -> input pipeline) and the rest (waits on other streams).
When the window covers under half of the profiled host time, the GPU idled outside it as well.
CPU-only traces get the torch-op account instead: ops running vs none running. Pure: reads
the signals and the trace tables the signal stage already produced.
"""
from __future__ import annotations

from diagnose.account.kinds import KINDS
from diagnose.model import Account, AccountTerm, Signal
from diagnose.results.details import Details, TraceGroup
from diagnose.results.traces import trace_views

SRC = "torch profiler trace (Kineto)"
SYNC_MIN_PCT = 10.0  # below this share of host time, blocking syncs are not a cause of idle
WINDOW_MIN_PCT = 50.0


def _v(signals: dict[str, Signal], name: str) -> float | None:
    """A percentage signal's value in 0..100 (counters from a broken exporter can read 250 or -3)."""
    s = signals.get(name)
    return None if s is None or s.value is None else min(100.0, max(0.0, s.value))


def _terms(parts: dict[str, float], total_s: float, evidence: dict[str, str]) -> tuple[AccountTerm, ...]:
    out = []
    for kind, pct in parts.items():
        if pct <= 0:
            continue
        k = KINDS[kind]
        out.append(AccountTerm(kind, k.label, pct / 100.0, total_s * pct / 100.0, k.quadrant, k.layer,
                               evidence.get(kind, ""), k.rule_id))
    return tuple(sorted(out, key=lambda t: -t.share))


def _busy(signals: dict[str, Signal], busy: float) -> tuple[dict[str, float], dict[str, str]]:
    exposed = min(busy, _v(signals, "gpu.comm_exposed_pct") or 0.0)
    rest = busy - exposed
    g_c = _v(signals, "kernels.group_share_pct[compute]") or 0.0
    g_m = _v(signals, "kernels.group_share_pct[memory]") or 0.0
    if g_c + g_m <= 0:  # only collectives ran: count the rest as compute-kernel time (HTA's compute)
        g_c = 1.0
    parts = {"gpu.compute": rest * g_c / (g_c + g_m), "gpu.memory": rest * g_m / (g_c + g_m),
             "gpu.comm_exposed": exposed}
    ev = {"gpu.compute": f"busy {busy:.0f}% of the kernel window; compute kernels {g_c:.0f}% of GPU event time",
          "gpu.memory": f"busy {busy:.0f}% of the kernel window; memory kernels {g_m:.0f}% of GPU event time",
          "gpu.comm_exposed": f"collectives with no compute kernel beside them: {exposed:.0f}% of the window"}
    return parts, ev


def _idle(signals: dict[str, Signal], idle: float) -> tuple[dict[str, float], dict[str, str]]:
    short = min(idle, _v(signals, "gpu.short_gap_idle_pct") or 0.0)
    long_ = idle - short
    sync_pct = _v(signals, "torch.sync_blocked_pct") or 0.0
    sync = min(long_, sync_pct) if sync_pct >= SYNC_MIN_PCT else 0.0
    rest = long_ - sync
    host_share = _v(signals, "gpu.idle_host_wait_pct")
    host = rest * (host_share / 100.0 if host_share is not None else 1.0)
    io = sum(_v(signals, f"join.gap_category_share_pct[{c}]") or 0.0 for c in ("io_wait", "io_cpu"))
    parts = {"gpu.idle_launch": short, "gpu.idle_sync": sync, "gpu.idle_input": host * io / 100.0,
             "gpu.idle_host": host * (1 - io / 100.0), "gpu.idle_other": rest - host}
    ev = {"gpu.idle_launch": f"idle {idle:.0f}% of the window, {short:.0f}% in gaps under the idle-gap minimum",
          "gpu.idle_sync": f"the host spent {sync_pct:.0f}% of its time blocked in synchronisations/blocking copies",
          "gpu.idle_input": f"during the idle gaps {io:.0f}% of the threads' active samples were in reads (py-spy)",
          "gpu.idle_host": (f"{host_share:.0f}% of per-stream idle was host wait (HTA)" if host_share is not None
                            else "no per-stream idle breakdown"),
          "gpu.idle_other": "per-stream idle that was neither host wait nor launch overhead (HTA other)"}
    return parts, ev


def _events(details: Details | TraceGroup) -> int:
    return sum(t.temporal.events for t in trace_views(details.torch_traces) if t.temporal is not None)


def _window_s(details: Details | TraceGroup, key: str) -> float:
    total = 0
    for t in trace_views(details.torch_traces):
        if key == "gpu" and t.temporal is not None:
            total += t.temporal.span_ns
        elif key == "host" and t.coverage is not None:
            total += t.coverage.host_span_ns or 0
    return total / 1e9


def gpu_account(signals: dict[str, Signal], details: Details | TraceGroup) -> Account | None:
    """The GPU-time account, or None without a kernel timeline."""
    idle = _v(signals, "gpu.idle_pct")
    if idle is None:
        return None
    window_s = _window_s(details, "gpu")
    busy_parts, busy_ev = _busy(signals, 100.0 - idle)
    idle_parts, idle_ev = _idle(signals, idle)
    parts = {**busy_parts, **idle_parts}
    cover = _v(signals, "gpu.kernel_window_pct")
    notes = ["busy time split by the kernel groups' shares of GPU event time (overlap counted once)"]
    total_s = window_s
    if cover is not None and 0 < cover < WINDOW_MIN_PCT:
        parts = {k: v * cover / 100.0 for k, v in parts.items()}
        parts["gpu.idle_outside"] = 100.0 - cover
        idle_ev["gpu.idle_outside"] = f"the kernel window covers only {cover:.1f}% of the profiled host time"
        total_s = window_s * 100.0 / cover
        notes.append("the account spans the profiled host time: the kernel window covers under half of it")
    title = ("GPU time over the kernel window" if total_s == window_s
             else f"GPU time over the profiled host time (the kernel window covers {cover:.0f}% of it)")
    return Account("gpu", title, "GPU-s", total_s,
                   _terms(parts, total_s, {**busy_ev, **idle_ev}), tuple(notes),
                   SRC + " temporal breakdown and idle breakdown (HTA definitions), py-spy in the gaps",
                   _events(details))


BUSY_PRIMARY_PCT = 50.0  # counters only: a GPU busy less than this is not the limiting resource


def gpu_counters_account(signals: dict[str, Signal], capture_s: float | None) -> Account | None:
    """No kernel timeline, but GPU counters: busy time (graphics-engine activity, else SM activity,
    else NVML utilization.gpu)
    split between compute and bandwidth in the ratio of math-pipe activity (the busiest of DCGM/GPM
    tensor, FP16, FP32 pipes; without one, half of SM activity: SM activity counts resident warps,
    stalled ones too) to DRAM activity (DCGM DRAM_ACTIVE / GPM DRAM_BW_UTIL). Idle time stays not
    attributed (only a kernel timeline says what the GPU waited for). None when the GPU was busy
    under half the time: the host side is then the place to look (the thread account)."""
    sm, dram = _v(signals, "gpu.sm_active_pct"), _v(signals, "gpu.dram_active_pct")
    # GPU-Util (NVML) says a kernel was resident, not that the GPU worked: engine activity first
    busy = next((v for v in (_v(signals, "gpu.gr_engine_active_pct"), sm, _v(signals, "gpu.kernel_busy_pct"))
                 if v is not None), None)
    pipes = [v for v in (_v(signals, f"gpu.{p}_active_pct") for p in ("tensor", "fp16", "fp32")) if v is not None]
    math = max(pipes) if pipes and max(pipes) > 0 else (sm / 2 if sm is not None else None)
    if busy is None or math is None or dram is None or busy < BUSY_PRIMARY_PCT or math + dram <= 0:
        return None
    total_s = capture_s or 0.0
    parts = {"gpu.compute": busy * math / (math + dram), "gpu.memory": busy * dram / (math + dram)}
    ev = {k: f"GPU busy {busy:.0f}% of the capture; math pipes {math:.0f}%, DRAM activity {dram:.0f}% "
             "(counters; busy time split in that ratio)" for k in parts}
    return Account("gpu", "GPU time over the capture (GPU counters)", "GPU-s", total_s,
                   _terms(parts, total_s, ev),
                   ("counters cannot say what an idle GPU waited for: idle time is not attributed; busy time split "
                    "by math-pipe vs DRAM activity",),
                   "GPU counters (DCGM/GPM engine, pipe and DRAM activity; NVML utilization)")


def torch_cpu_account(signals: dict[str, Signal], details: Details | TraceGroup) -> Account | None:
    """CPU-only torch trace: the profiled window with torch ops running vs none running."""
    op_idle = _v(signals, "torch.op_idle_pct")
    if op_idle is None:
        return None
    total_s = _window_s(details, "host")
    comm = min(op_idle, _v(signals, "torch.host_comm_pct") or 0.0)
    parts = {"torch.ops": 100.0 - op_idle, "torch.comm": comm, "torch.between_ops": op_idle - comm}
    ev = {"torch.ops": f"union of cpu_op events: {100 - op_idle:.0f}% of the profiled window",
          "torch.comm": f"host collectives (gloo/MPI labels) with no op running: {comm:.0f}% of the profiled window",
          "torch.between_ops": f"no torch op nor collective ran in {op_idle - comm:.0f}% of the profiled window"}
    return Account("torch_ops", "profiled host time of a CPU-only torch trace", "s", total_s,
                   _terms(parts, total_s, ev), ("CPU-only trace: no GPU activity recorded",),
                   SRC + ", cpu_op events")


__all__ = ["gpu_account", "gpu_counters_account", "torch_cpu_account"]

"""Test helpers at the hardware boundary: NVML call recordings built from real captures, and a
local HTTP server serving real dcgm-exporter outputs.

Replay streams are built from the public captures in ../shared/data, read in place:
- NVML values from ``nvidia-smi`` captures (utkuozdemir/nvidia_gpu_exporter: H100 80GB HBM3 and
  H200, idle and under gpu-burn): the query-gpu CSV gives static facts, the five ``dmon`` rows
  give the per-poll utilisation, power, temperature and clocks, ``pmon`` the per-process SM/mem %.
- NVML values for the T4 from the DEV_* fields of its dcgm-exporter sample (dcgm-exporter reads
  those through NVML), so NVML and DCGM describe the same GPU.
- GPM values: the shared data has no GPM capture. Scenario values are taken from the DCGM
  profiling ratios of the same counters where a sample exists (T4 loaded: GR 15.6%, tensor 0.6%,
  DRAM 9.3%; A100 MIG instance: GR 99.6%, tensor 93.0%, DRAM 80.0%) and are constructed for the
  bandwidth-bound case (no public sample); ``GPM_SCENARIOS`` says which.
The files follow collectors/nvml_replay.py's format exactly (what RecordingBackend writes).
"""
from __future__ import annotations

import csv
import io
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from diagnose.catalogs.dcgm_fields import parse_exposition
from diagnose.collectors.nvml_replay import FORMAT, VERSION
from helpers import SHARED_DATA

SMI = SHARED_DATA / "nvidia-smi"
DCGM = SHARED_DATA / "dcgm"
SMI_FILES = {"h100": "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
             "h200": "nvidia_gpu_exporter__linux-x86_64__nvidia-h200__590.48.01.txt"}
DCGM_FILES = {"t4": "cncf-k8s-ai-conformance_ericsson-ccd_tesla-t4_loaded.prom",
              "l40s": "cncf-k8s-ai-conformance_upcloud_l40s_idle.prom",
              "a100-mig": "nvidia-cloud-native-docs_a100_mig_loaded.prom",
              "counters-csv": "dcgm-exporter_etc_default-counters.csv"}

# GPM metric values per scenario, in percent, and where they come from.
GPM_SCENARIOS: dict[str, tuple[dict[str, float], str]] = {
    "waiting": ({"graphics_util_pct": 15.6205, "any_tensor_util_pct": 0.5822, "dram_bw_util_pct": 9.2781},
                "T4 dcgm-exporter sample: GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE"),
    "compute": ({"graphics_util_pct": 99.5687, "any_tensor_util_pct": 93.0433, "dram_bw_util_pct": 80.0339},
                "A100 MIG instance 13 dcgm-exporter sample: GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE"),
    "bandwidth": ({"graphics_util_pct": 99.0, "sm_util_pct": 92.0, "sm_occupancy_pct": 70.0,
                   "any_tensor_util_pct": 0.0, "dram_bw_util_pct": 86.0},
                  "constructed: a streaming copy keeps warps resident on every SM and DRAM near its ceiling"),
}


def nvml_works() -> bool:
    """True where the live NVML backend finds a GPU (then the no-GPU tests do not apply)."""
    from diagnose.collectors.nvml_backend import LiveNvmlBackend, NvmlUnavailable

    backend = LiveNvmlBackend()
    try:
        return bool(backend.open().get("device_count"))
    except NvmlUnavailable:
        return False
    finally:
        backend.close()


HAS_GPU = nvml_works()


def need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"shared recording {path} is absent (../shared/data not mounted)")
    return path


@dataclass
class SmiPhase:
    query: dict[str, str]  # query-gpu CSV: header -> value
    dmon: list[dict[str, float]]
    pmon: list[dict[str, str]]


def _sections(text: str) -> dict[tuple[str, str], str]:
    parts = re.split(r"^#{20,}\n# (\w+) :: ([^\n]*)\n(?:#[^\n]*\n)*?#{20,}\n", text, flags=re.M)
    return {(parts[i], parts[i + 1].split(" (")[0]): parts[i + 2] for i in range(1, len(parts) - 2, 3)}


def _table(block: str) -> list[dict[str, str]]:
    lines = [ln for ln in block.splitlines() if ln.strip()]
    header = lines[0].lstrip("# ").split()
    return [dict(zip(header, ln.split())) for ln in lines[2:]]


def smi_phase(model: str, phase: str) -> SmiPhase:
    """One phase ("idle" or "load") of a shared nvidia-smi capture."""
    secs = _sections(need(SMI / SMI_FILES[model]).read_text())
    rows = list(csv.reader(io.StringIO(secs[(phase, "query-gpu")].strip()), skipinitialspace=True))
    query = {k: v for k, v in zip(rows[0], rows[1])}
    dmon = [{k: float(v) for k, v in r.items() if v != "-"} for r in _table(secs[(phase, "dmon")])]
    return SmiPhase(query, dmon, _table(secs[(phase, "pmon")]))


def _num(text: str) -> float:
    return float(text.split()[0])


def smi_device(p: SmiPhase, gpm: bool, mig: bool = False) -> dict[str, Any]:
    q = p.query
    return {"index": 0, "uuid": q["uuid"], "name": q["name"], "pci_bus_id": q["pci.bus_id"],
            "memory_total_bytes": int(_num(q["memory.total [MiB]"])) << 20,
            "sm_clock_max_mhz": _num(q["clocks.max.sm [MHz]"]),
            "mem_clock_max_mhz": _num(q["clocks.max.memory [MHz]"]),
            "power_limit_mw": _num(q["enforced.power.limit [W]"]) * 1000, "mig_mode": mig,
            "architecture": "hopper", "gpm_supported": gpm and not mig,
            "gpm_reason": None if gpm and not mig else "no GPM in this replay", "unknown": {}}


NOT_CAPTURED = "not in the nvidia-smi capture this replay was built from"
NOT_SUPPORTED = "NotSupported: not offered by this GPU, driver or MIG mode"  # nvml_backend.REASONS[3]


def smi_reads(p: SmiPhase, n: int, pid: int | None, mig: bool = False,
              event_reasons: list[int] | None = None) -> list[dict[str, Any]]:
    """``n`` NVML read results cycling through the capture's dmon rows, one sample per poll
    (sample times as µs offsets from the poll)."""
    used = int(_num(p.query["memory.used [MiB]"])) << 20
    total = int(_num(p.query["memory.total [MiB]"])) << 20
    burn = [r for r in p.pmon if r.get("sm", "-") != "-"]
    out = []
    for k in range(n):
        d = p.dmon[k % len(p.dmon)]
        values = {"mem_used_bytes": used, "mem_total_bytes": total, "sm_clock_mhz": d["pclk"],
                  "mem_clock_mhz": d["mclk"], "power_mw": d["pwr"] * 1000, "temp_c": d["gtemp"],
                  "clock_event_reasons": (event_reasons[k % len(event_reasons)] if event_reasons
                                          else int(p.query["clocks_event_reasons.active"], 16))}
        unknown = {"pcie_tx_bytes_per_s": NOT_CAPTURED, "pcie_rx_bytes_per_s": NOT_CAPTURED}
        samples: dict[str, list] = {}
        if mig:  # NVML answers NotSupported for device utilisation under MIG
            unknown["gpu_util_pct"] = unknown["mem_util_pct"] = NOT_SUPPORTED
        else:
            values["gpu_util_pct"], values["mem_util_pct"] = d["sm"], d["mem"]
            samples = {"gpu_util_pct": [[-20_000, d["sm"]]], "mem_util_pct": [[-20_000, d["mem"]]],
                       "power_mw": [[-20_000, d["pwr"] * 1000]]}
        procs = [[pid, -10_000, float(burn[k % len(burn)]["sm"]), float(burn[k % len(burn)]["mem"])]] \
            if burn and pid is not None and not mig else []
        out.append({"values": values, "unknown": unknown, "samples": samples, "process_samples": procs})
    return out


def write_calls(path: Path, host: dict[str, Any], devices: list[dict[str, Any]],
                processes: list[dict[str, Any]], reads: list[dict[str, Any]],
                gpm: dict[str, float] | None = None, period_s: float = 0.1, meta: dict | None = None) -> Path:
    """A recording in nvml_replay.py's format: what RecordingBackend writes for these results."""
    t0 = 1_700_000_000_000_000_000
    lines = [{"call": "meta", "format": FORMAT, "version": VERSION, **(meta or {})},
             {"call": "open", "gpu": None, "t_ns": t0, "result": host},
             {"call": "devices", "gpu": None, "t_ns": t0, "result": devices}]
    lines += [{"call": "processes", "gpu": 0, "t_ns": t0, "result": p} for p in processes]
    for k, r in enumerate(reads):  # sample times in ``reads`` are µs offsets from the read itself
        t_ns = t0 + int(k * period_s * 1e9)
        now_us = t_ns // 1000
        placed = {**r, "samples": {key: [[now_us + dt, v] for dt, v in rows] for key, rows in r["samples"].items()},
                  "process_samples": [[pid, now_us + dt, sm, mem] for pid, dt, sm, mem in r["process_samples"]]}
        lines.append({"call": "read", "gpu": 0, "t_ns": t_ns, "result": placed})
    if gpm is not None:
        lines.append({"call": "gpm_read", "gpu": 0, "t_ns": t0, "result": {"warming": True}})
        lines += [{"call": "gpm_read", "gpu": 0, "t_ns": t0 + k * 500_000_000,
                   "result": {"metrics": gpm, "unknown": {}, "interval_ns": 500_000_000}} for k in range(1, 40)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def smi_recording(path: Path, model: str, phase: str, pid: int | None, scenario: str | None = None,
                  mig: bool = False, event_reasons: list[int] | None = None, n: int = 50) -> Path:
    """NVML (+ GPM) recording of one nvidia-smi capture phase with ``pid`` as the GPU process."""
    p = smi_phase(model, phase)
    host = {"device_count": 1, "driver_version": p.query["driver_version"], "nvml_version": None,
            "cuda_driver_version": None}
    procs = [{"pids": [[pid, 15690 << 20, 13 if mig else None]]}] if pid is not None else [{"pids": []}]
    gpm = GPM_SCENARIOS[scenario][0] if scenario else None
    return write_calls(path, host, [smi_device(p, gpm is not None, mig)], procs,
                       smi_reads(p, n, pid, mig, event_reasons), gpm,
                       meta={"built_from": SMI_FILES[model], "phase": phase, "gpm": scenario})


def t4_recording(path: Path, pid: int, n: int = 50) -> Path:
    """NVML recording of the T4 built from the DEV_* fields of its dcgm-exporter sample."""
    ent = parse_exposition(need(DCGM / DCGM_FILES["t4"]).read_text())[0]
    v = ent["values"]
    dev = {"index": 0, "uuid": ent["uuid"], "name": ent["model"], "pci_bus_id": ent["pci_bus_id"],
           "memory_total_bytes": int(v["fb_used_mib"] + v["fb_free_mib"]) << 20, "sm_clock_max_mhz": 1590.0,
           "mem_clock_max_mhz": 5001.0, "power_limit_mw": 70000.0, "mig_mode": False, "architecture": "turing",
           "gpm_supported": False, "gpm_reason": "GPM needs Hopper or newer; Tesla T4 is turing", "unknown": {}}
    read = {"values": {"gpu_util_pct": v["gpu_util_pct"], "mem_util_pct": v["mem_copy_util_pct"],
                       "sm_clock_mhz": v["sm_clock_mhz"], "mem_clock_mhz": v["mem_clock_mhz"],
                       "power_mw": v["power_w"] * 1000, "temp_c": v["temp_c"], "clock_event_reasons": 0,
                       "mem_used_bytes": int(v["fb_used_mib"]) << 20, "mem_total_bytes": dev["memory_total_bytes"]},
            "unknown": {}, "samples": {}, "process_samples": []}
    host = {"device_count": 1, "driver_version": "590.48.01", "nvml_version": None, "cuda_driver_version": None}
    return write_calls(path, host, [dev], [{"pids": [[pid, 5120 << 20, None]]}], [read] * n,
                       meta={"built_from": DCGM_FILES["t4"]})


class DcgmServer:
    """dcgm-exporter stand-in: serves the shared exporter outputs over HTTP on 127.0.0.1.

    ``/<name>/metrics`` serves DCGM_FILES[name] read in place; ``extra`` adds generated pages.
    """

    def __init__(self, extra: dict[str, str] | None = None):
        pages = {name: (lambda f=f: need(DCGM / f).read_text()) for name, f in DCGM_FILES.items()}
        pages.update({name: (lambda t=t: t) for name, t in (extra or {}).items()})
        self.served = 0  # pages answered with 200
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                name = self.path.strip("/").removesuffix("/metrics")
                if name not in pages:
                    self.send_error(404)
                    return
                body = pages[name]().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                server.served += 1

            def log_message(self, *args):  # keep pytest output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="test-dcgm-http", daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def t4_variant(renames: dict[str, str] | None = None, blanks: tuple[str, ...] = ()) -> str:
    """The T4 sample with fields renamed (e.g. to DCGM 4.6 names) or set to DCGM's blank value."""
    text = need(DCGM / DCGM_FILES["t4"]).read_text()
    for old, new in (renames or {}).items():
        text = text.replace(old + "{", new + "{")
    for name in blanks:
        text = re.sub(rf"^({name}\{{[^}}]*\}}) \S+$", r"\1 9223372036854775792", text, flags=re.M)
    return text


def wait_for(pred, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def replay_factory(recording: Path):
    """Backend factory for the collectors: each collector gets its own ReplayBackend."""
    from diagnose.collectors.nvml_replay import ReplayBackend

    return lambda: ReplayBackend(recording)


def capture(pid: int, out: Path, collectors: tuple, duration_s: float = 1.5, **options) -> Path:
    """Run a real Capture of ``pid`` with ``collectors`` and return the bundle path."""
    from diagnose.capture.session import Capture
    from diagnose.capture.target import resolve_target
    from diagnose.collectors import CaptureOptions

    opts = CaptureOptions(duration_s=duration_s, **{"gpu_rate_hz": 20.0, **options})
    result = Capture(resolve_target(pid), opts, out, command=["test"], collectors=collectors).run(threading.Event())
    return result.bundle_path

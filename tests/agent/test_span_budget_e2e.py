"""Issue 12: an OpenTelemetry-heavy target under `diagnose run` (requests as fast as it makes them,
two spans each) kept 0.50x of its throughput during a capture and 0.59x for 12 s after attach
exited, while the agent's capture thread converted queued spans under the GIL. With the per-span
budget the target's own count of requests served keeps >= 0.7x of its rate before the capture (0.77-0.96x
measured on this shared 2-core VM; the benchmark, not this test, holds the 0.90 target), the
bundle's QPS (a 1-in-N sample of traces scaled by N) matches that count, and the report says the
spans were sampled."""
from __future__ import annotations

import json
import os
import select
import time

import pytest

from agent_helpers import service  # noqa: F401  (fixture)
from helpers import findings, only_bundle, run_diagnose

pytestmark = pytest.mark.live  # the target's throughput ratio: run alone


def _counts_until(svc, t_ns: int, timeout_s: float = 10.0) -> list[tuple[int, int]]:
    """The target's "COUNT <unix ns> <requests>" lines, read until one is past ``t_ns``."""
    rows = [tuple(map(int, ln.split()[1:])) for ln in svc.lines if ln.startswith("COUNT ")]
    fd, buf = svc.proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while (not rows or rows[-1][0] < t_ns) and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            rows += [tuple(map(int, ln.split()[1:])) for ln in lines if ln.startswith(b"COUNT ")]
    assert rows and rows[-1][0] >= t_ns, f"the target stopped counting: {rows[-3:]}"
    return rows  # type: ignore[return-value]


def _rate(rows: list[tuple[int, int]], lo_ns: int, hi_ns: int) -> float:
    """Requests per second the target served between two times, by its own count."""
    inside = [r for r in rows if lo_ns <= r[0] <= hi_ns]
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / ((t1 - t0) / 1e9)


def test_a_span_heavy_target_keeps_its_throughput_and_the_bundle_its_qps(service, tmp_path):  # noqa: F811
    svc = service("--rate", "0", "--max-s", "40", workload="span_flood")
    res = run_diagnose("attach", str(svc.pid), "--duration", "2", "--torch-window", "0", "--skip", "pyspy",
                       "--out", str(tmp_path / "out"), "--no-tui", timeout=120)
    exited_ns = time.time_ns()
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path / "out")
    manifest = json.loads((bundle / "manifest.json").read_text())
    agent = {c["name"]: c for c in manifest["collectors"]}["agent"]
    assert agent["state"] == "ok", agent["reason"]  # finished: not "did not finish within 10 s"
    c = agent["counts"]
    lo, hi = c["spans_window_ns"]
    rows = _counts_until(svc, exited_ns + 600_000_000)
    before, during = _rate(rows, lo - 10**9, lo), _rate(rows, lo, hi)
    after = _rate(rows, exited_ns, exited_ns + 600_000_000)  # attach has exited: nothing left converting
    print(f"target's rate: before {before:,.0f}/s, during x{during / before:.3f}, after attach x{after / before:.3f}")
    assert during >= 0.7 * before and after >= 0.7 * before, (before, during, after, c)

    fraction = c["spans_keep_fraction"]
    assert fraction < 1 and c["spans_seen"] > c["spans_kept"] > 0 and c["spans_discarded_at_stop"] == 0, c
    assert c["spans_cpu_pct"] <= 2.5 * c["spans_cpu_budget_pct"], c
    doc = findings(bundle)
    qps = doc["signals"]["spans.qps"]["value"]
    assert 0.7 * during <= qps <= 1.3 * during, (qps, during, c)
    assert f"1-in-{round(1 / fraction)} sample" in doc["signals"]["spans.qps"]["source"]
    assert doc["data_quality"]["spans"]["coverage"] is None  # sampled out is not dropped
    [warning] = [w for w in doc["data_quality"]["warnings"] if "spans were sampled" in w["text"]]
    assert warning["collectors"] == ["agent"]
    report = (bundle / "report.md").read_text()
    head = report.split("## Where the time went")[0].lower()
    assert f"spans were sampled 1 in {round(1 / fraction)}" in head
    assert f"The agent's span work used {c['spans_cpu_s']:.2f} s of CPU" in report

"""`diagnose attach --export` on a real process: the capture's bundle and report are written first,
the live receiver gets the metrics with the target's resource, the Prometheus file is written, and a
receiver that is down costs one warning line, never the capture or the exit code."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from export_helpers import OtlpSink
from helpers import only_bundle


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a live capture (~7 s); fast siblings: test_otlp.py, test_prometheus.py on the report command
def test_attach_exports_after_the_report_and_a_dead_receiver_is_a_warning(workload, tmp_path):
    proc = workload("json_loop")
    sink = OtlpSink()
    prom = tmp_path / "diagnose.prom"
    try:
        res = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration", "1", "--no-tui",
                              "--out", str(tmp_path), "--torch-window", "0", "--export", f"otlp={sink.url}",
                              "--export", f"otlp=http://127.0.0.1:{_dead_port()}", "--export", f"prometheus={prom}",
                              "--export-attr", "job.id=7", "--export-timeout", "1"],
                             capture_output=True, text=True, timeout=90)
    finally:
        sink.close()
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path)
    assert (bundle / "report.md").is_file() and (bundle / "findings.json").is_file()
    assert "verdict: service" in res.stdout
    warnings = [line for line in res.stderr.splitlines() if line.startswith("diagnose: warning: export")]
    assert len(warnings) == 1 and "connection refused" in warnings[0], res.stderr
    assert "exported " in res.stderr and f"wrote Prometheus metrics to {prom}" in res.stderr
    resource = {kv.key: kv.value for kv in sink.metrics[0].resource_metrics[0].resource.attributes}
    assert resource["process.pid"].int_value == proc.pid and resource["job.id"].string_value == "7"
    assert resource["service.name"].string_value.startswith("python")  # no spans: the process name
    names = {m.name for rm in sink.metrics[0].resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"diagnose.verdict.confidence", "diagnose.quadrant.share", "diagnose.capture.cpu.time"} <= names
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    cpu = {s.labels["process"]: s.value for s in fams["diagnose_capture_cpu_time_seconds"].samples}
    assert cpu["diagnose"] > 0  # diagnose's own capture cost, from the manifest's cost record

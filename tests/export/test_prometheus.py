"""Prometheus text exposition through prometheus_client: the file parses back (prometheus_client's
parser) with the values, units and resource; it is written 0600 and never through a symlink or
into a FIFO; :PORT is scraped over HTTP on loopback only; a real Prometheus server scrapes it."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diagnose.export.prometheus import exposition, metric_name, write_file
from diagnose.export.run import ExportRequest, hold, run_exports
from diagnose.export.snapshot import snapshot
from diagnose.export.targets import parse_export
from diagnose.pipeline import analyse
from helpers import REPO


def _samples(text: str) -> dict:
    """{(name, labels as a sorted tuple): value} of an exposition, read by prometheus_client's parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_names_take_the_unit_as_a_suffix():
    assert metric_name("diagnose.request.duration", "s") == "diagnose_request_duration_seconds"
    assert metric_name("diagnose.request.rate", "{request}/s") == "diagnose_request_rate_per_second"
    assert metric_name("diagnose.gpu.sm.activity", "1") == "diagnose_gpu_sm_activity_ratio"
    assert metric_name("diagnose.capture.memory.peak", "By") == "diagnose_capture_memory_peak_bytes"
    assert metric_name("diagnose.findings", "{finding}") == "diagnose_findings"


def test_the_file_parses_back_with_values_and_resource(served_report, tmp_path):
    path = tmp_path / "diagnose.prom"
    write_file(path, snapshot(served_report, {"job.id": "4711"}))
    assert os.stat(path).st_mode & 0o777 == 0o600
    got = _samples(path.read_text())
    p99 = served_report.analysis.signals["spans.p99_ms"].value / 1e3
    assert got[("diagnose_request_duration_seconds", (("percentile", "p99"),))] == pytest.approx(p99)
    assert got[("diagnose_request_rate_per_second", ())] == pytest.approx(
        served_report.analysis.signals["spans.qps"].value)
    assert got[("diagnose_capture_cpu_time_seconds", (("process", "diagnose"),))] == 0.5
    info = [labels for (name, labels) in got if name == "target_info"]
    assert len(info) == 1 and dict(info[0])["service_name"] == "llm-api" and dict(info[0])["job_id"] == "4711"
    v = served_report.verdict
    conf = [(dict(lb), val) for (name, lb), val in got.items() if name == "diagnose_verdict_confidence_ratio"]
    assert conf == [({"quadrant": "service", "layer": "service", "account": "threads"}, v.confidence)]
    findings = {dict(lb)["rule_id"]: dict(lb) for (name, lb) in got if name == "diagnose_finding_info"}
    assert findings["service.serialization"]["severity"] == "critical"
    assert findings.keys() == {f.rule_id for f in served_report.analysis.findings}


def test_two_accounts_of_one_resource_are_two_series():
    text = exposition(snapshot(analyse(REPO / "fixtures/gpu/compute-bf16-matmul")))
    got = _samples(text.decode())
    gpu = [dict(lb)["account_title"] for (name, lb) in got if name == "diagnose_account_time_seconds"
           and dict(lb)["account"] == "gpu"]
    assert len(gpu) == 2 and len(set(gpu)) == 2  # a duplicate series would fail a real scrape


def test_the_file_is_never_written_through_a_symlink_or_into_a_fifo(served_report, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "diagnose.prom"
    link.symlink_to(victim)
    snap = snapshot(served_report)
    with pytest.raises(OSError) as err:
        write_file(link, snap)
    assert err.value.errno == errno.ELOOP and victim.read_text() == "keep" and link.is_symlink()
    fifo = tmp_path / "fifo.prom"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as err:
        write_file(fifo, snap)  # would block forever if opened
    assert err.value.errno == errno.EINVAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diagnose.prom", "fifo.prom", "victim"]  # no temp left
    out = run_exports(snap, ExportRequest((parse_export(f"prometheus={link}"),)))
    assert not out[0].ok and "refusing" in out[0].line and "choose a regular file" in out[0].line


def test_the_port_serves_on_loopback_and_stops(served_report):
    port = _free_port()
    (out,) = run_exports(snapshot(served_report), ExportRequest((parse_export(f"prometheus=:{port}"),)))
    assert out.ok and out.line == f"serving Prometheus metrics on http://127.0.0.1:{port}/metrics"
    assert out.server.server_address[0] == "127.0.0.1"  # nothing beyond loopback unless HOST is given
    said: list[str] = []
    wake = threading.Event()
    t = threading.Thread(target=hold, args=([out.server], 30.0, said.append, wake))
    t.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert _samples(body)[("diagnose_findings", (("severity", "critical"),))] >= 1
    finally:
        wake.set()
        t.join(5)
    assert not t.is_alive() and said == ["serving for 30 s; Ctrl-C stops it", "stopped serving Prometheus metrics"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_port_in_use_is_a_warning(served_report):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        spec = f"prometheus=:{busy.getsockname()[1]}"
        (out,) = run_exports(snapshot(served_report), ExportRequest((parse_export(spec),)))
    assert not out.ok and out.server is None and "choose a free port" in out.line and spec in out.line


def test_ctrl_c_ends_the_hold_and_the_exit_code_stays(served_bundle, tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", "report", str(served_bundle), "-o",
                             str(tmp_path / "r.md"), "--export", f"prometheus=:{port}", "--export-hold", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving for" not in line:
            line = proc.stderr.readline()
            assert line, proc.communicate()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert b"diagnose_verdict_confidence_ratio" in resp.read()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0 and time.monotonic() - t0 < 5 and "stopped serving" in err
    assert (tmp_path / "r.md").is_file()


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (Debian: apt-get install prometheus; "
                                                 ".ci/run installs it)")
def test_a_real_prometheus_server_scrapes_it(served_report, tmp_path):
    port, web = _free_port(), _free_port()
    (out,) = run_exports(snapshot(served_report), ExportRequest((parse_export(f"prometheus=:{port}"),)))
    assert out.ok
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "diagnose", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}))  # JSON is YAML
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{web}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    query = urllib.parse.quote('diagnose_request_duration_seconds{percentile="p99"}')
    p99 = served_report.analysis.signals["spans.p99_ms"].value / 1e3
    result: list = []
    try:
        deadline = time.monotonic() + 15
        while not result and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?query={query}", timeout=2) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                continue
    finally:
        proc.terminate()
        proc.wait(10)
        out.server.shutdown()
        out.server.server_close()
    assert result, "Prometheus never scraped the exposition"
    assert result[0]["metric"]["job"] == "diagnose" and float(result[0]["value"][1]) == pytest.approx(p99)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool (Debian's prometheus package ships it; "
                                                             ".ci/run installs it)")
def test_promtool_finds_nothing_to_lint(served_report):
    res = subprocess.run(["promtool", "check", "metrics"], input=exposition(snapshot(served_report)),
                         capture_output=True, timeout=10)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res


def test_resource_from_the_environment_and_the_command_line(served_bundle, tmp_path):
    from click.testing import CliRunner

    from diagnose.cli import main

    path = tmp_path / "m.prom"
    res = CliRunner().invoke(main, ["report", str(served_bundle), "-o", str(tmp_path / "r.md"), "--export",
                                    f"prometheus={path}", "--export-attr", "job.id=10"],
                             env={"OTEL_RESOURCE_ATTRIBUTES": "job.id=9,team=infra", "OTEL_SERVICE_NAME": "gateway"})
    assert res.exit_code == 0, res.output
    (info,) = [dict(lb) for (name, lb) in _samples(path.read_text()) if name == "target_info"]
    assert info["job_id"] == "10" and info["team"] == "infra" and info["service_name"] == "gateway"

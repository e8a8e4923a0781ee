"""Serving-metrics collector (``--metrics URL``) against real HTTP servers on 127.0.0.1: a simulated
vLLM/SGLang served by prometheus_client's own server (tests/serving_sim.py), the shared
dcgm-exporter pages, and hostile endpoints (garbage lines, huge pages, redirects, trickling)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.records.serving import ServingScrapeRecord, ServingSourceRecord
from diagnose.bundle.streams import SERVING, SERVING_RAW
from diagnose.catalogs.serving_fields import (
    MAX_BUCKETS,
    MAX_GARBAGE,
    MAX_PARSED_LINES,
    MAX_SERIES_PER_METRIC,
    read_page,
)
from diagnose.collectors import serving_metrics as sm_mod
from diagnose.collectors.serving_metrics import MetricsPage, ScrapeError, ServingMetricsCollector, parse_metrics_url
from diagnose.model import Report
from diagnose.render import render
from diagnose.verdict.analyze import analyze
from gpu_replay import DCGM, DCGM_FILES, DcgmServer, capture, need
from helpers import REPO, findings, only_bundle, run_diagnose
from serving_sim import Live

FIXTURES = REPO / "fixtures" / "serving-metrics"


class PageServer:
    """Serves fixed bodies (or a redirect, or a trickle) at /<name>/metrics on 127.0.0.1."""

    def __init__(self, pages: dict[str, bytes]):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                name = self.path.strip("/").removesuffix("/metrics")
                if name == "slow-headers":  # a header byte every 0.1 s: each read meets its socket timeout
                    self.wfile.write(b"HTTP/1.0 200 OK\r\n")
                    for b in b"X-Padding: " + b"x" * 60 + b"\r\n\r\n":
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.1)
                    return
                if name == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "file:///etc/passwd")
                    self.end_headers()
                    return
                body = pages.get(name)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                if name == "trickle":  # a byte every 0.1 s: each read returns before a socket timeout
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.1)
                    return
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{name}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def pages():
    clean = (FIXTURES / "vllm-2.txt").read_text()
    lines = clean.splitlines()
    garbage = "\n".join(lines[:6] + ['vllm:num_requests_waiting{model_name="x" 3', "!!! not a metric",
                                     "vllm:num_requests_running{} not-a-number"] + lines[6:]) + "\n"
    server = PageServer({"vllm": clean.encode(), "garbage": garbage.encode(),
                         "huge": b"vllm:num_requests_running 1\n" * ((sm_mod.MAX_BYTES // 28) + 10),
                         "trickle": clean.encode()[:200], "slow-headers": b""})
    yield server
    server.close()


def test_garbage_lines_are_reported_and_the_rest_is_read(pages):
    clean = read_page(MetricsPage(pages.url("vllm")).fetch())
    dirty = read_page(MetricsPage(pages.url("garbage")).fetch())
    assert dirty.series == clean.series and clean.garbage == 0
    assert dirty.garbage == 2 and any('num_requests_waiting{model_name="x" 3' in g for g in dirty.garbage_lines)
    assert dirty.other_lines == clean.other_lines + 1  # "!!! not a metric": not an engine metric, not parsed


def test_shared_dcgm_exporter_pages_hold_no_engine_metric():
    proms = sorted(DCGM.glob("*.prom"))
    if not proms:
        pytest.skip(f"no shared dcgm-exporter recordings in {DCGM} (../shared/data not mounted)")
    for path in proms:
        page = read_page(path.read_text())
        assert page.series == [] and page.garbage == 0 and page.other_lines > 10, path.name
    csv = read_page(need(DCGM / DCGM_FILES["counters-csv"]).read_text())  # not exposition at all
    assert csv.series == [] and csv.garbage == 0


def test_series_buckets_and_labels_are_capped():
    series = "".join(f'vllm:num_requests_running{{model_name="m{i}",x="{"y" * 500}"}} 1\n' for i in range(2000))
    buckets = "".join(f'vllm:e2e_request_latency_seconds_bucket{{le="{i}"}} {i}\n' for i in range(1000))
    page = read_page(series + buckets + 'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 1000\n')
    running = [s for s in page.series if s["name"] == "vllm:num_requests_running"]
    assert len(running) == MAX_SERIES_PER_METRIC and all(len(v) <= 128 for s in running for v in s["labels"].values())
    e2e = [s for s in page.series if s["name"] == "vllm:e2e_request_latency_seconds"][0]
    assert len(e2e["buckets"]) == MAX_BUCKETS
    assert page.dropped == 2000 - MAX_SERIES_PER_METRIC + 1001 - MAX_BUCKETS


def test_a_page_of_garbage_or_of_too_many_lines_costs_a_bounded_parse():
    # the bound is in lines parsed (what the counts below say), not in seconds of this host
    garbage = read_page("vllm:num_requests_running{ 1\n" * 20_000)
    assert garbage.garbage == MAX_GARBAGE and "the rest of the page was left" in garbage.garbage_lines[-1]
    many = read_page("vllm:num_requests_running 1\n" * (MAX_PARSED_LINES + 500))
    assert many.dropped == 500 and f"only the first {MAX_PARSED_LINES} read" in many.garbage_lines[-1]


def test_an_expensive_page_spaces_the_scrapes_out(workload, tmp_path, monkeypatch):
    """A page that costs more than MAX_CPU_SHARE of the scrape period to read delays the next scrape
    by its cost / MAX_CPU_SHARE. The share is set so low here that any page of 2,500 series costs more
    (whatever this host's speed): after the first timed scrape the next is minutes away, so a 2 s
    capture keeps two pages (the probe's and that one), not three, and says it slowed down once."""
    import diagnose.collectors.serving_metrics as collector

    monkeypatch.setattr(collector, "MAX_CPU_SHARE", 1e-4)
    big = "".join(f'vllm:num_requests_running{{model_name="m{i}"}} 1\n' for i in range(2500))
    server = PageServer({"big": big.encode()})
    try:
        proc = workload("idle_parent")
        b = Bundle.open(capture(proc.pid, tmp_path, (ServingMetricsCollector(),), duration_s=2.2,
                                metrics_url=server.url("big")))
    finally:
        server.close()
    st = b.collectors["serving"]
    assert st.counts["slowed"] == 1 and st.counts["records"] == 2, st.counts


def test_hostile_endpoints_fail_with_a_reason(pages, monkeypatch):
    with pytest.raises(ScrapeError, match="returned more than 4 MiB"):
        MetricsPage(pages.url("huge")).fetch()
    with pytest.raises(ScrapeError, match="HTTP 302"):  # never followed to file:///etc/passwd
        MetricsPage(pages.url("redirect")).fetch()
    monkeypatch.setattr(sm_mod, "TIMEOUT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(ScrapeError, match="took more than 0.5 s"):
        MetricsPage(pages.url("trickle")).fetch()
    assert time.monotonic() - t0 < 1.5
    t0 = time.monotonic()  # the deadline holds for the headers too (urllib's timeout is per read)
    with pytest.raises(ScrapeError, match="took more than 0.5 s"):
        MetricsPage(pages.url("slow-headers")).fetch()
    assert time.monotonic() - t0 < 1.5
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ScrapeError, match="cannot reach"):
        MetricsPage(f"http://127.0.0.1:{port}/metrics").fetch()


def test_only_http_urls():
    assert parse_metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    for bad in ("file:///etc/passwd", "127.0.0.1:8000", "ftp://host/metrics", "http:///metrics"):
        with pytest.raises(ValueError, match="--metrics expects http"):
            parse_metrics_url(bad)


def test_host_omitted_means_loopback():
    """``--metrics :18001/metrics`` was a usage error; it means 127.0.0.1 as ``prometheus=:PORT`` does."""
    assert parse_metrics_url(":18001/metrics") == "http://127.0.0.1:18001/metrics"
    assert parse_metrics_url(":18001") == "http://127.0.0.1:18001/metrics"
    for bad in (":port/metrics", ":99999"):
        with pytest.raises(ValueError, match=r"or :PORT\[/path\] \(127.0.0.1\)"):
            parse_metrics_url(bad)


def test_live_vllm_capture_writes_the_stream_and_the_findings(workload, tmp_path):
    live = Live("vllm")
    try:
        proc = workload("idle_parent")
        # once a second: 3.2 s leaves a second of slack for the third scrape on a loaded host (2.2 s got 2 in CI)
        path = capture(proc.pid, tmp_path, (ServingMetricsCollector(),), duration_s=3.2, metrics_url=live.url)
    finally:
        live.close()
    b = Bundle.open(path)
    st = b.collectors["serving"]
    assert st.state.value == "ok" and st.counts["records"] >= 3 and SERVING.name in st.streams
    recs = b.typed(SERVING)
    assert isinstance(recs[0], ServingSourceRecord) and recs[0].engine == "vllm" and recs[0].url == live.url
    scrapes = [r for r in recs if isinstance(r, ServingScrapeRecord)]
    assert len(scrapes) >= 3 and all(r.garbage == 0 for r in scrapes) and not b.invalid_records
    assert (path / SERVING_RAW.file(1)).read_text().startswith("# HELP vllm:")
    a = analyze(b)
    assert a.signals["serving.kv_cache_usage_max_pct"].value >= 97.0
    assert a.signals["serving.queue_share_pct"].value == pytest.approx(40.0, abs=0.5)
    kv = [f for f in a.findings if f.rule_id == "engine.kv_cache_pressure"]
    assert len(kv) == 1 and kv[0].layer.value == "engine"
    assert "service.engine_queueing" in {f.rule_id for f in a.findings}
    engine = [acc for acc in a.accounts if "serving engine" in acc.title][0]
    assert engine.terms[0].kind == "engine.queue" and engine.terms[0].share == pytest.approx(0.4, abs=0.01)
    md = render(Report(b, a), "md")
    for line in ("engine in-flight requests (running + waiting)", "TTFT P50 / P99 (bucket-interpolated)",
                 "KV-cache usage, mean / max", "TPOT: (e2e - TTFT) / (output tokens - 1)",
                 "The engine is memory-limited: KV cache full, requests preempted"):
        assert line in md, line


def test_a_page_without_engine_metrics_is_unavailable(workload, tmp_path):
    dcgm = DcgmServer()
    try:
        proc = workload("idle_parent")
        b = Bundle.open(capture(proc.pid, tmp_path, (ServingMetricsCollector(),), duration_s=1.0,
                                metrics_url=dcgm.url("t4")))
    finally:
        dcgm.close()
    st = b.collectors["serving"]
    assert st.state.value == "unavailable" and "exposes no vLLM, SGLang, Triton or TGI metric" in st.reason
    assert not b.has(SERVING.name)


def _close_after_scrapes(live: Live, out: Path, scrapes: int) -> None:
    """Close the engine once the capture under ``out`` recorded ``scrapes`` scrapes (its stream is
    flushed as it goes): a fixed delay raced the probe's own on a loaded host (one scrape, no rate)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        written = [ln for f in out.glob(f"*/{SERVING.name}") for ln in f.read_text().splitlines()]
        if sum('"scrape"' in ln for ln in written) >= scrapes:
            break
        time.sleep(0.02)
    live.close()


def test_an_engine_that_goes_away_leaves_a_partial_record(workload, tmp_path):
    proc = workload("idle_parent")
    live = Live("sglang")
    threading.Thread(target=_close_after_scrapes, args=(live, tmp_path, 2), daemon=True).start()
    b = Bundle.open(capture(proc.pid, tmp_path, (ServingMetricsCollector(),), duration_s=3.2,
                            metrics_url=live.url))
    st = b.collectors["serving"]
    assert st.state.value == "partial" and "cannot reach" in st.reason and st.counts["errors"] >= 1
    assert analyze(b).signals["serving.gpu_overlap_wait_pct"].known  # the scrapes before it count


@pytest.mark.slow
def test_attach_with_metrics_url_reports_the_engine(workload, tmp_path):
    """The live end-to-end run (~7 s on 2 cores); its fast sibling is the live capture above."""
    live = Live("tgi")
    try:
        proc = workload("idle_parent")
        res = run_diagnose("attach", str(proc.pid), "--duration", "2", "--out", str(tmp_path),
                           "--metrics", live.url, "--skip", "pyspy")
    finally:
        live.close()
    assert res.returncode == 0, res.stderr
    assert "  engine queue time, share of end-to-end latency: 60%" in res.stdout  # the terminal says it too
    bundle = only_bundle(tmp_path)
    doc = findings(bundle)
    assert doc["signals"]["serving.queue_share_pct"]["value"] == pytest.approx(60.0, abs=0.5)
    assert "service.engine_queueing" in {f["rule_id"] for f in doc["findings"]}
    md = (bundle / "report.md").read_text()
    assert "engine queue time, share of end-to-end latency | 60%" in md
    assert "ITL: time between consecutive output tokens of one request" in md
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [c for c in manifest["collectors"] if c["name"] == "serving"][0]["state"] == "ok"


def test_bad_metrics_url_is_a_usage_error(tmp_path):
    res = run_diagnose("attach", "1", "--duration", "1", "--out", str(tmp_path), "--metrics", "file:///etc/passwd")
    assert res.returncode == 2 and "--metrics expects http(s)://HOST[:PORT][/path] or :PORT[/path]" in res.stderr
    assert not list(tmp_path.iterdir())

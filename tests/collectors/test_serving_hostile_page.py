"""Hostile /metrics pages and --metrics URLs (review 15): a line that would cost the parser minutes
is dropped before it, the series cap does not depend on page order, a scrape still busy at stop()
does not hold the capture's end, and a URL with a bad port or credentials is a usage error."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from diagnose.bundle import Bundle, CollectorState
from diagnose.catalogs.serving_fields import (
    MAX_PARSE_LABELS,
    MAX_PARSE_LINE_CHARS,
    MAX_SERIES_PER_METRIC,
    read_page,
)
from diagnose.cli import EXIT_USAGE, main
from diagnose.collectors.base import ThreadedCollector
from diagnose.collectors.serving_metrics import ServingMetricsCollector, parse_metrics_url
from gpu_replay import capture

GOOD = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"


def _wide(labels: int) -> str:
    return "vllm:num_requests_running{" + ",".join(f'l{i}="v"' for i in range(labels)) + "} 1"


def test_a_line_of_32k_labels_is_garbage_not_seconds_of_parsing():
    """Before: 2.1 s of CPU in prometheus_client's label parser (and minutes for a 4 MiB line)."""
    t0 = time.process_time()
    page = read_page(GOOD + _wide(32_000) + "\n")
    assert time.process_time() - t0 < 0.3
    assert page.garbage == 1 and "not parsed" in page.garbage_lines[0] and len(page.garbage_lines[0]) < 300
    assert [s["value"] for s in page.series] == [3.0]  # the good line still counts


def test_the_line_bounds_are_length_and_label_count():
    assert read_page(_wide(MAX_PARSE_LABELS) + "\n").garbage == 0
    assert read_page(_wide(MAX_PARSE_LABELS + 1) + "\n").garbage == 1
    long = 'vllm:num_requests_running{model_name="' + "m" * MAX_PARSE_LINE_CHARS + '"} 1\n'
    assert read_page(long).garbage == 1


def test_the_series_cap_keeps_the_same_series_whatever_the_page_order():
    """Before: the first 32 in page order were kept, so a reordered page changed the summed set."""
    def page(order) -> str:
        return "".join(f'vllm:request_success_total{{model_name="m{i:02d}"}} {1000 + i}\n' for i in order)

    n = MAX_SERIES_PER_METRIC + 1
    kept = [{s["labels"]["model_name"] for s in read_page(page(o)).series} for o in (range(n), reversed(range(n)))]
    assert kept[0] == kept[1] and len(kept[0]) == MAX_SERIES_PER_METRIC
    assert read_page(page(reversed(range(n)))).dropped == 1


class _Stuck(ThreadedCollector):
    """A collector whose reading never ends until released (a parse that takes minutes)."""

    name = "stuck"
    period_s = 0.01

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.reading = threading.Event()

    def probe(self, target, options):  # pragma: no cover - not used: started directly
        raise NotImplementedError

    def _setup(self, target, options, bundle) -> None:
        pass

    def counts(self) -> dict:
        return {"records": 1}

    def tick(self) -> bool:
        self.reading.set()
        self.release.wait(30)
        return False


def test_stop_does_not_wait_for_a_stuck_reading_and_says_partial():
    """Before: stop() returned OK after its timeout, the thread still busy, no reason given."""
    c = _Stuck()
    c.start(None, None, None)  # type: ignore[arg-type]
    try:
        assert c.reading.wait(30)  # a stop before the first reading began would rightly say OK
        t0 = time.monotonic()
        st = c.stop(0.3)
        assert time.monotonic() - t0 < 1.0
        assert st.state is CollectorState.PARTIAL and "still busy after the 0.3 s stop timeout" in st.reason
    finally:
        c.release.set()


class _Engine:
    """A first good page (the probe's), then one line of ``labels`` labels on every later GET."""

    def __init__(self, labels: int):
        bad = (_wide(labels) + "\n").encode()
        served = {"n": 0}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                served["n"] += 1
                body = GOOD.encode() if served["n"] == 1 else bad
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_capture_with_a_1_mb_line_ends_on_time_and_partial(workload, tmp_path):
    """Before: a 1.4 MB line (128k labels) took 25 s to parse per scrape; `attach --duration 3` took
    16 s and the collector said ok."""
    engine = _Engine(100_000)
    try:
        proc = workload("idle_parent")
        t0 = time.monotonic()
        b = Bundle.open(capture(proc.pid, tmp_path, (ServingMetricsCollector(),), duration_s=1.5,
                                metrics_url=engine.url))
        took = time.monotonic() - t0
    finally:
        engine.close()
    st = b.collectors["serving"]
    assert took < 5.0, f"{took:.1f} s"
    assert st.state is CollectorState.PARTIAL and "malformed line(s)" in st.reason and st.counts["garbage_lines"] >= 1
    assert st.counts["records"] >= 2


@pytest.mark.parametrize("url, said", [
    ("http://127.0.0.1:abc/", "port must be a number in 1-65535"),
    ("http://127.0.0.1:99999/", "port must be a number in 1-65535"),
    (":0", "port must be a number in 1-65535"),
    ("http://127.0.0.1:/metrics", "port must be a number in 1-65535"),
    ("http://user:secret@127.0.0.1:8000/metrics", "credentials in the URL"),
    ("http://token@127.0.0.1:8000/metrics", "credentials in the URL"),
])
def test_a_bad_metrics_url_is_a_usage_error_that_never_echoes_a_secret(url, said, tmp_path):
    with pytest.raises(ValueError, match=said):
        parse_metrics_url(url)
    res = CliRunner().invoke(main, ["attach", "999999", "--duration", "1", "--metrics", url, "--out", str(tmp_path)])
    assert res.exit_code == EXIT_USAGE and said in res.output, res.output
    assert "secret" not in res.output and "token" not in res.output
    assert not list(tmp_path.iterdir())


def test_a_good_metrics_url_still_parses():
    assert parse_metrics_url(":8000") == "http://127.0.0.1:8000/metrics"
    assert parse_metrics_url("http://[::1]:8000/m") == "http://[::1]:8000/m"
    assert parse_metrics_url("https://engine.local/metrics") == "https://engine.local/metrics"

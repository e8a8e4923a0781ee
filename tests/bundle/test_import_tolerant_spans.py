"""Span files with one bad record keep the rest: a span whose time OTLP cannot hold is dropped and
counted, not the whole file; one server-lifetime root span among many requests stays out of the
request statistics (QPS, latency, the bundle's window) and the report says so."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.importers import import_files
from diagnose.signals.spans.lifetime import MIN_OTHERS, lifetime_mask
from diagnose.signals.timeline import timeline_signals

T0 = 1_700_000_000_000_000_000
DAY_NS = 24 * 3600 * 10**9
MS = 10**6


def span(i: int, start: int, end: int, name: str = "GET /x") -> dict:
    return {"traceId": "%032x" % (i + 1), "spanId": "%016x" % (i + 1), "name": name, "kind": 2,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end)}


def requests(n: int = 100) -> list[dict]:
    """``n`` requests of 5 ms, one every 100 ms (10.1 per second of their window)."""
    return [span(i, T0 + i * 100 * MS, T0 + i * 100 * MS + 5 * MS) for i in range(n)]


def otlp_file(path: Path, spans: list[dict]) -> Path:
    path.write_text(json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"scope": {"name": "s"}, "spans": spans}]}]}))
    return path


def otlp_status(bundle: Path) -> dict:
    m = json.loads((bundle / "manifest.json").read_text())
    return next(c for c in m["collectors"] if c["name"] == "otlp")


@pytest.mark.parametrize("field,value", [
    ("startTimeUnixNano", str(2**64)), ("startTimeUnixNano", -5), ("endTimeUnixNano", "-1"),
    ("endTimeUnixNano", 2**70), ("events", [{"name": "e", "timeUnixNano": str(2**64)}]),
])
def test_one_span_with_an_out_of_range_time_costs_only_that_span(tmp_path, field, value):
    spans = requests()
    spans[10][field] = value
    bundle = import_files([otlp_file(tmp_path / "s.json", spans)], tmp_path / "out")
    status = otlp_status(bundle)
    assert status["counts"]["spans"] == 99
    assert "1 span(s) rejected (time_out_of_range)" in status["reason"]
    kept = [json.loads(ln)["span_id"] for ln in (bundle / "spans.jsonl").read_text().splitlines()]
    assert len(kept) == 99 and f"{11:016x}" not in kept


def test_a_span_with_a_malformed_field_costs_only_that_span(tmp_path):
    spans = requests()
    spans[3]["name"] = {"not": "a string"}
    spans[4]["attributes"] = 5
    bundle = import_files([otlp_file(tmp_path / "s.json", spans)], tmp_path / "out")
    status = otlp_status(bundle)
    assert status["counts"]["spans"] == 98 and "2 span(s) rejected (malformed_span)" in status["reason"]


@pytest.mark.parametrize("lifetime", ["ends a day later", "started a day before"])
def test_a_server_lifetime_root_span_stays_out_of_qps_latency_and_the_window(tmp_path, lifetime):
    spans = requests()
    end = T0 + 99 * 100 * MS + 5 * MS
    serve = (T0, T0 + DAY_NS) if lifetime == "ends a day later" else (end - DAY_NS, end)
    spans.append(span(500, *serve, name="serve"))
    bundle = import_files([otlp_file(tmp_path / "s.json", spans)], tmp_path / "out")
    m = json.loads((bundle / "manifest.json").read_text())
    assert (m["ended_ns"] - m["started_ns"]) / 1e9 == pytest.approx(9.905)  # not 24 h
    assert "1 root span(s) left out of the bundle's time window as server-lifetime spans" in otlp_status(
        bundle)["reason"]
    res = timeline_signals(Bundle.open(bundle))
    assert res.signals["spans.qps"].value == pytest.approx(100 / 9.905)  # 10.1, not 0.0
    req = res.details.requests
    assert req is not None and req.latency is not None and req.lifetime_excluded is not None
    assert req.requests == 100 and req.latency.max_ms == pytest.approx(5.0)
    assert req.lifetime_excluded.count == 1 and req.lifetime_excluded.names == ("serve",)
    assert res.data_quality.spans.requests_excluded.startswith("1 root span(s) (serve; the longest 86400 s) left out")


def test_the_report_says_which_spans_it_left_out(tmp_path):
    spans = requests() + [span(500, T0, T0 + DAY_NS, name="serve")]
    path = otlp_file(tmp_path / "s.json", spans)
    res = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(path), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    report = next((tmp_path / "o").iterdir()) / "report.md"
    assert ("**Data quality:** 1 root span(s) (serve; the longest 86400 s) left out of the request statistics "
            "(QPS, latency, window) as server-lifetime spans") in report.read_text()


def _mask(spans_ms: list[tuple[float, float]]) -> list[bool]:
    """lifetime_mask of (start, duration) pairs in ms."""
    start = np.array([s for s, _ in spans_ms]) * MS
    end = start + np.array([d for _, d in spans_ms]) * MS
    return lifetime_mask(start.astype(np.int64), end.astype(np.int64)).tolist()


def test_slow_requests_are_never_lifetime_spans():
    base = [(100.0 * i, 5.0) for i in range(100)]  # 5 ms requests over 10 s
    day = DAY_NS / MS
    assert _mask(base + [(0.0, day)]) == [False] * 100 + [True]
    assert _mask(base + [(9_905.0 - day, day)]) == [False] * 100 + [True]  # ended with the last request
    assert not any(_mask(base + [(5_000.0, 4_000.0)] * 3))  # 800x the median, amid the traffic only
    assert not any(_mask(base + [(10_000.0, day)]))  # after the traffic: a request of its own
    back_to_back = [(0.02 * i, 0.01) for i in range(30)]  # 30 requests in 0.6 ms, one stalled 10 ms
    assert not any(_mask(back_to_back[:15] + [(0.3, 10.0)] + [(10.3 + 0.02 * i, 0.01) for i in range(15)]))
    assert not any(_mask([(0.0, 5.0)] * (MIN_OTHERS - 1) + [(0.0, day)]))  # too few others to judge by
    assert not any(_mask(base[:50] + [(0.0, day)] * 50))  # half the roots: that is the workload
    assert _mask([(10.0 * i, 0.0) for i in range(100)] + [(0.0, 2_000.0)]) == [False] * 100 + [True]

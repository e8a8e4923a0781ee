"""What a new user found in the export and serving-metrics features: the engine's /metrics signals
exported (with their source where spans measured the same metric), one quadrant spelling, HELP
without stray units, OTLP points stamped with the capture's end, a silent receiver told apart from
a refusing one, and a confident critical finding never cut from the ticket behind a weak one.

The serving bundle is the export fixture (spans) plus the vLLM recording of
fixtures/serving-metrics as its serving-metrics.jsonl stream (tests/serving_sim.py)."""
from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import threading
import time

import pytest
from click.testing import CliRunner

from diagnose.cli import EXIT_OK, main
from diagnose.export import otlp
from diagnose.export.otlp import ExportFailed, send
from diagnose.export.prometheus import exposition
from diagnose.export.snapshot import snapshot
from diagnose.model import Account, AccountTerm, Evidence, Finding, Layer, Quadrant, Severity
from diagnose.pipeline import analyse
from diagnose.render import render
from serving_sim import recording


@pytest.fixture(scope="module")
def engine_bundle(served_bundle, tmp_path_factory):
    b = tmp_path_factory.mktemp("engine") / "bundle"
    shutil.copytree(served_bundle, b)
    records, _index = recording("vllm")
    (b / "serving-metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return b


@pytest.fixture(scope="module")
def engine_report(engine_bundle):
    return analyse(engine_bundle)


def _points(snap) -> dict:
    return {(p.name, p.attributes): p.value for p in snap.points}


def test_engine_signals_are_exported_with_their_source(engine_report):
    s = engine_report.analysis.signals
    assert s["serving.kv_cache_usage_mean_pct"].value == pytest.approx(96.0)  # the recording's truth
    pts = _points(snapshot(engine_report))
    assert pts[("diagnose.serving.kv_cache.usage", (("statistic", "mean"),))] == pytest.approx(0.96)
    assert pts[("diagnose.serving.kv_cache.usage", (("statistic", "max"),))] == pytest.approx(0.99)
    assert pts[("diagnose.serving.queue.share", ())] == pytest.approx(0.40)
    assert pts[("diagnose.serving.requests.in_flight", (("statistic", "mean"),))] == 11.0
    assert pts[("diagnose.serving.preemption.rate", ())] == pytest.approx(s["serving.preemptions_per_s"].value)
    assert pts[("diagnose.gen_ai.inter_token_latency", (("percentile", "p99"),))] == pytest.approx(0.05)
    # spans and the engine both measured QPS and TTFT: one point each, told apart by ``source``
    assert pts[("diagnose.request.rate", (("source", "engine"),))] == pytest.approx(s["serving.qps"].value)
    assert pts[("diagnose.request.rate", (("source", "spans"),))] == pytest.approx(s["spans.qps"].value)
    assert pts[("diagnose.gen_ai.time_to_first_token", (("percentile", "p50"), ("source", "engine")))] == \
        pytest.approx(0.0625)
    assert ("diagnose.gen_ai.time_to_first_token", (("percentile", "p50"), ("source", "spans"))) in pts
    text = exposition(snapshot(engine_report)).decode()
    assert 'diagnose_serving_kv_cache_usage_ratio{statistic="mean"} 0.96' in text
    assert 'diagnose_request_rate_per_second{source="engine"}' in text


def test_report_export_prometheus_file_has_the_engine_metrics(engine_bundle, tmp_path):
    out = tmp_path / "m.prom"
    res = CliRunner().invoke(main, ["report", str(engine_bundle), "-o", str(tmp_path / "r.md"),
                                    "--export", f"prometheus={out}"])
    assert res.exit_code == EXIT_OK, res.output
    body = out.read_text()
    for name in ("diagnose_serving_kv_cache_usage_ratio", "diagnose_serving_queue_share_ratio",
                 "diagnose_serving_requests_in_flight", "diagnose_gen_ai_time_per_output_token_seconds"):
        assert name in body, name


def test_spans_only_points_carry_no_source(served_report):
    pts = _points(snapshot(served_report))
    assert ("diagnose.request.rate", ()) in pts and not any(k[0].startswith("diagnose.serving.") for k in pts)


def test_one_quadrant_spelling_and_help_without_units(served_report):
    acc = Account("threads", "thread-time", "thread-s", 10.0,
                  (AccountTerm("idle", "waiting for work", 0.7, 7.0, None, None, "py-spy idle"),
                   AccountTerm("svc", "serialization", 0.3, 3.0, Quadrant.SERVICE, Layer.SERVICE, "py-spy")))
    a = dataclasses.replace(served_report.analysis, accounts=(acc,))
    text = exposition(snapshot(dataclasses.replace(served_report, analysis=a))).decode()
    assert 'quadrant="no_load"' in text and "no load" not in text
    assert 'diagnose_quadrant_share_ratio{account="threads",quadrant="no_load"}' in text
    helps = [line for line in text.splitlines() if line.startswith("# HELP")]
    assert helps and not [h for h in helps if h.endswith((" (1)", "({finding})", "(s)", "(see labels)"))], helps


def test_otlp_points_are_stamped_with_the_capture_end(served_report, otlp_sink):
    send(snapshot(served_report), otlp_sink.url, timeout_s=5)
    stamps = {dp.time_unix_nano for req in otlp_sink.metrics for rm in req.resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics for dp in m.gauge.data_points}
    assert stamps == {served_report.manifest["ended_ns"]}


def test_a_silent_receiver_is_a_timeout_not_a_missing_one(served_report):
    """A receiver that accepts the connection and never answers: the cause is that it did not
    answer, and the fix is not "start the receiver"."""
    srv = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # read nothing, answer nothing
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        with pytest.raises(ExportFailed) as err:
            send(snapshot(served_report), url, timeout_s=0.5)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    assert f"the receiver at {url}/v1/metrics did not answer within 0.5 s" in str(err.value)
    assert err.value.fix == otlp.FIX_TIMEOUT and "start the OTLP/HTTP receiver" not in err.value.fix
    assert time.monotonic() - t0 < 4


def _finding(rule: str, quadrant: Quadrant | None, severity: Severity, confidence: float) -> Finding:
    evidence = (Evidence("serving.kv_cache_usage_max_pct", 99.0, "%", ">=", 95.0, "vllm /metrics"),)
    return Finding(rule, f"title of {rule}", "summary " + "x" * 600, quadrant, Layer.SERVICE, severity, confidence,
                   evidence, ("suggestion " + "y" * 300,))


def test_a_confident_critical_finding_is_never_cut_behind_a_weak_one(served_report):
    weak = [_finding(f"io.weak{i}", Quadrant.IO, Severity.CRITICAL, 0.18) for i in range(40)]
    kv = _finding("engine.kv_cache_pressure", None, Severity.CRITICAL, 0.82)
    a = dataclasses.replace(served_report.analysis, findings=(*weak, kv))
    md = render(dataclasses.replace(served_report, analysis=a), "md")
    assert isinstance(md, str) and "more finding(s) left out" in md  # the budget did cut
    shown = md.split("## Findings", 1)[1].split("more finding(s) left out", 1)[0]
    assert "title of engine.kv\\_cache\\_pressure (secondary" in shown  # GFM-escaped


def test_analyze_prints_the_engine_lines(engine_bundle, tmp_path):
    res = CliRunner().invoke(main, ["analyze", str(engine_bundle)])
    assert res.exit_code == EXIT_OK, res.output
    assert "  KV-cache usage, mean / max: 96% / 99%" in res.output

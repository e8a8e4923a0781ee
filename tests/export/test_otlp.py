"""OTLP metrics and logs through the SDK's own exporters to a real receiver (http.server on
127.0.0.1, bodies decoded with opentelemetry-proto): names, values, units, resource attributes and
the findings as log records arrive; a receiver that refuses or is down is one line naming it."""
from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from diagnose.cli import EXIT_OK, main
from diagnose.export.otlp import ExportFailed, send
from diagnose.export.snapshot import snapshot
from export_helpers import OtlpSink


def _attrs(kvs) -> dict:
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = (v.string_value if v.HasField("string_value") else v.int_value if v.HasField("int_value")
                       else [x.string_value for x in v.array_value.values])
    return out


def _gauges(sink) -> dict:
    """{(name, attributes as a sorted tuple): (value, unit)} of every gauge point received."""
    out = {}
    for req in sink.metrics:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    assert m.WhichOneof("data") == "gauge", m.name
                    for dp in m.gauge.data_points:
                        out[(m.name, tuple(sorted(_attrs(dp.attributes).items())))] = (dp.as_double, m.unit)
    return out


def test_metrics_and_logs_arrive_with_units_values_and_resource(served_report, otlp_sink):
    snap = snapshot(served_report, {"job.id": "4711"})
    sent = send(snap, otlp_sink.url, timeout_s=5)
    assert sent.points == len(snap.points) and sent.log_records == len(snap.findings) > 0
    assert set(otlp_sink.paths) == {"/v1/metrics", "/v1/logs"}
    resource = _attrs(otlp_sink.metrics[0].resource_metrics[0].resource.attributes)
    assert resource["service.name"] == "llm-api" and resource["host.name"] == "vm" and resource["job.id"] == "4711"
    assert resource["process.pid"] == served_report.manifest["target"]["pid"]
    g = _gauges(otlp_sink)
    p99 = served_report.analysis.signals["spans.p99_ms"].value / 1e3
    assert g[("diagnose.request.duration", (("percentile", "p99"),))] == (pytest.approx(p99), "s")
    assert g[("diagnose.request.rate", ())][1] == "{request}/s"
    assert g[("diagnose.gen_ai.time_to_first_token", (("percentile", "p50"),))] == (pytest.approx(0.004), "s")
    assert g[("diagnose.capture.cpu.time", (("process", "diagnose"),))] == (0.5, "s")
    v = served_report.verdict
    conf = [(k, val) for k, val in g.items() if k[0] == "diagnose.verdict.confidence"]
    assert len(conf) == 1 and dict(conf[0][0][1])["quadrant"] == "service" and conf[0][1] == (v.confidence, "1")
    assert g[("diagnose.quadrant.share", (("account", "threads"), ("quadrant", "service")))][0] == pytest.approx(1.0)

    records = [(r, _attrs(rl.resource.attributes)) for req in otlp_sink.logs for rl in req.resource_logs
               for sl in rl.scope_logs for r in sl.log_records]
    assert len(records) == len(served_report.analysis.findings)
    by_rule = {_attrs(r.attributes)["diagnose.rule_id"]: r for r, _ in records}
    f = next(f for f in served_report.analysis.findings if f.rule_id == "service.serialization")
    rec = by_rule["service.serialization"]
    assert rec.body.string_value == f.title and rec.severity_text == "ERROR" and rec.severity_number == 17
    attrs = _attrs(rec.attributes)
    assert attrs["diagnose.layer"] == "service" and attrs["diagnose.quadrant"] == "service"
    assert attrs["diagnose.evidence"][0].startswith("cpu.category_share_pct[serialization]=")
    assert all(res["service.name"] == "llm-api" and res["job.id"] == "4711" for _, res in records)
    assert rec.time_unix_nano == served_report.manifest["ended_ns"]


def test_a_receiver_that_refuses_is_named_with_its_status(served_report):
    sink = OtlpSink(status=400)
    try:
        with pytest.raises(ExportFailed) as err:
            send(snapshot(served_report), sink.url, timeout_s=2)
    finally:
        sink.close()
    said = str(err.value)
    assert f"metrics to {sink.url}/v1/metrics: HTTP 400" in said and f"logs to {sink.url}/v1/logs: HTTP 400" in said
    assert "\n" not in said and "OTEL_EXPORTER_OTLP_HEADERS" in err.value.fix


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_receiver_down_keeps_the_report_and_the_exit_code(served_bundle, tmp_path):
    t0 = time.monotonic()
    out = tmp_path / "report.md"
    res = CliRunner().invoke(main, ["report", str(served_bundle), "-o", str(out),
                                    "--export", f"otlp=http://127.0.0.1:{_dead_port()}", "--export-timeout", "1"])
    assert res.exit_code == EXIT_OK, res.output
    assert out.read_text().startswith("# Service-bound")
    warn = [line for line in res.output.splitlines() if line.startswith("diagnose: warning: export otlp=")]
    assert len(warn) == 1 and "connection refused: nothing listens there" in warn[0], res.output
    assert "logs not sent" in warn[0] and warn[0].endswith("; start the OTLP/HTTP receiver or correct HOST:PORT "
                                                          "(its base URL, e.g. http://HOST:4318)")
    assert time.monotonic() - t0 < 8

"""OTLP/HTTP export of a Snapshot through the OpenTelemetry SDK's own exporters: the points as
gauges (a MeterProvider with an InMemoryMetricReader, collected once and handed to
``OTLPMetricExporter``, each point stamped with the capture's end as the log records are), the
findings as log records (a LoggerProvider whose
BatchLogRecordProcessor feeds ``OTLPLogExporter``, flushed once). Both share one Resource:
the Snapshot's attributes over ``OTEL_RESOURCE_ATTRIBUTES`` (the SDK's ``Resource.create``).

The exporters read their usual environment too (``OTEL_EXPORTER_OTLP_HEADERS`` for auth headers,
``OTEL_EXPORTER_OTLP_CERTIFICATE``); the endpoints are the ``otlp=URL`` base plus ``/v1/metrics``
and ``/v1/logs``. The SDK reports a failed export by logging it and returning FAILURE; this module
records both and raises ExportFailed with the cause in one line.

Needs the ``export`` extra (opentelemetry-exporter-otlp-proto-http): import this module only
after ``targets.otlp_missing()`` said it is installed.
"""
from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import requests
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    InMemoryMetricReader,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
)
from opentelemetry.sdk.resources import Resource

from diagnose.export.snapshot import Snapshot
from diagnose.model import Severity

TIMEOUT_S = 5.0  # per signal, retries included (the exporter backs off within it)
DEADLINE_SLACK_S = 2.0  # send()'s deadline beyond both signals' timeouts: the SDK's set-up and flush
SDK_LOGGER = "opentelemetry"  # the SDK and its exporters log below it


FIX_CONNECT = "start the OTLP/HTTP receiver or correct HOST:PORT (its base URL, e.g. http://HOST:4318)"
FIX_REFUSED = ("pass the receiver's OTLP/HTTP base URL (diagnose appends /v1/metrics and /v1/logs) and its auth "
               "headers in OTEL_EXPORTER_OTLP_HEADERS")
FIX_TIMEOUT = "check it is an OTLP/HTTP receiver and not overloaded, or raise --export-timeout"
NO_ANSWER = "did not answer within"  # in the cause when the receiver accepted the connection but said nothing


class ExportFailed(Exception):
    """An export did not reach its receiver: ``str()`` is the cause, one line; ``fix`` what to do."""

    def __init__(self, cause: str, fix: str = FIX_CONNECT):
        super().__init__(cause)
        self.fix = fix


@dataclass(frozen=True)
class OtlpSent:
    """What one OTLP export delivered: metric points and log records (one per finding)."""

    points: int
    log_records: int


def deadline_s(timeout_s: float) -> float:
    """The most one ``send`` takes, in seconds: metrics and logs ``timeout_s`` each, plus the SDK's
    set-up and flush."""
    return 2 * timeout_s + DEADLINE_SLACK_S


def send(snap: Snapshot, base_url: str, timeout_s: float = TIMEOUT_S) -> OtlpSent:
    """Send ``snap`` to the OTLP/HTTP receiver at ``base_url``: metrics, then logs (not tried when
    the metrics could not even connect: the same receiver). Returns within ``deadline_s(timeout_s)``
    seconds whatever the receiver does (the SDK's own timeout is per socket read: a receiver that
    trickles its answer would hold it for hours): the export runs in a daemon thread, left behind
    at the deadline (it cannot keep the process alive; the SDK providers register no atexit
    shutdown). Raises ExportFailed naming what went wrong (connection refused, no answer within
    ``timeout_s`` seconds, an answer not finished by the deadline, an HTTP status and reason: any
    status but 2xx, a redirect included, which is never followed)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["sent"] = _send(snap, base_url, timeout_s, errors)
        except ExportFailed as exc:
            box["failed"] = exc
        except Exception as exc:  # the SDK's failure, reported in the caller's thread
            box["failed"] = ExportFailed(f"{base_url}: {type(exc).__name__}: {exc}"[:300], FIX_CONNECT)
        finally:
            done.set()

    with _sdk_errors() as errors:
        worker = threading.Thread(target=run, name="diagnose-otlp-export", daemon=True)
        worker.start()
        finished = done.wait(deadline_s(timeout_s))
    if not finished:
        raise ExportFailed(f"the receiver at {base_url} had not finished answering after {deadline_s(timeout_s):g} s "
                           f"(export abandoned)", FIX_TIMEOUT)
    if "failed" in box:
        raise box["failed"]
    sent: OtlpSent = box["sent"]
    return sent


def _send(snap: Snapshot, base_url: str, timeout_s: float, errors: list[str]) -> OtlpSent:
    resource = Resource.create(dict(snap.resource))
    failed: list[str] = []
    points = records = 0
    try:
        points = _send_metrics(snap, resource, f"{base_url}/v1/metrics", timeout_s, errors)
    except ExportFailed as exc:
        failed.append(str(exc))
    if failed and not _http_status(errors):
        failed.append("logs not sent (the same receiver)")
    else:
        try:
            records = _send_logs(snap, resource, f"{base_url}/v1/logs", timeout_s, errors)
        except ExportFailed as exc:
            failed.append(str(exc))
    if failed:
        answered = any(": HTTP " in f for f in failed)  # the receiver is there; it refused
        silent = any(NO_ANSWER in f for f in failed)  # something listens there; it never answered
        raise ExportFailed("; ".join(failed), FIX_REFUSED if answered else FIX_TIMEOUT if silent else FIX_CONNECT)
    return OtlpSent(points, records)


class _Session(requests.Session):
    """The exporters' HTTP session: every answer that is not 2xx (a 3xx too, which the SDK counts
    as delivered; redirects are never followed) is logged as an export failure in the SDK's words
    (``code: N, reason: R``, what ``_http_status`` reads) and sets ``refused``."""

    def __init__(self, errors: list[str]):
        super().__init__()
        self.max_redirects = 0
        self.refused = False
        self._errors = errors
        self.hooks["response"].append(self._seen)

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["allow_redirects"] = False
        return super().request(method, url, *args, **kwargs)

    def _seen(self, resp: requests.Response, *args: Any, **kwargs: Any) -> None:
        if not 200 <= resp.status_code < 300:
            self.refused = True
            where = f" (to {resp.headers.get('Location', '')[:120]}: not followed)" if resp.is_redirect else ""
            self._errors.append(f"code: {resp.status_code}, reason: {resp.reason}{where}")


def _send_metrics(snap: Snapshot, resource: Resource, url: str, timeout_s: float, errors: list[str]) -> int:
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    try:
        meter = provider.get_meter("diagnose")
        gauges: dict[tuple[str, str], Any] = {}
        for p in snap.points:
            key = (p.name, p.unit)
            if key not in gauges:
                gauges[key] = meter.create_gauge(p.name, unit=p.unit, description=p.description)
            gauges[key].set(p.value, dict(p.attributes))
        data = reader.get_metrics_data()  # the one collection
    finally:
        provider.shutdown()
    if data is not None and snap.time_ns is not None:
        data = stamped(data, snap.time_ns)
    del errors[:]
    session = _Session(errors)
    exporter = OTLPMetricExporter(endpoint=url, timeout=timeout_s, session=session)
    try:
        if (data is None or exporter.export(data, timeout_millis=timeout_s * 1e3) is not MetricExportResult.SUCCESS
                or session.refused):
            raise ExportFailed(_cause("metrics", url, errors, timeout_s))
    finally:
        exporter.shutdown()
    return len(snap.points)


def stamped(data: MetricsData, time_ns: int) -> MetricsData:
    """``data`` with every gauge point's time set to ``time_ns`` (the capture's end, Unix ns) in
    place of the collection's: the SDK's point types are frozen dataclasses, rebuilt with
    ``dataclasses.replace``; a point of another kind is left as collected."""
    def metric(m: Metric) -> Metric:
        if not isinstance(m.data, Gauge):
            return m
        pts = [replace(p, time_unix_nano=time_ns) if isinstance(p, NumberDataPoint) else p for p in m.data.data_points]
        return replace(m, data=replace(m.data, data_points=pts))

    return replace(data, resource_metrics=[
        replace(rm, scope_metrics=[replace(sm, metrics=[metric(m) for m in sm.metrics]) for sm in rm.scope_metrics])
        for rm in data.resource_metrics])


_SEVERITY = {Severity.INFO: "INFO", Severity.WARNING: "WARN", Severity.CRITICAL: "ERROR"}


def _send_logs(snap: Snapshot, resource: Resource, url: str, timeout_s: float, errors: list[str]) -> int:
    if not snap.findings:
        return 0
    del errors[:]
    session = _Session(errors)
    exporter = _Recording(OTLPLogExporter(endpoint=url, timeout=timeout_s, session=session), session)
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter, export_timeout_millis=int(timeout_s * 1e3)))
    try:
        logger = provider.get_logger("diagnose")
        for f in snap.findings:
            text = _SEVERITY[f.severity]
            logger.emit(timestamp=snap.time_ns, severity_number=getattr(SeverityNumber, text), severity_text=text,
                        body=f.title, attributes={"diagnose.rule_id": f.rule_id, "diagnose.layer": f.layer,
                                                  "diagnose.quadrant": f.quadrant, "diagnose.summary": f.summary,
                                                  "diagnose.evidence": list(f.evidence)})
        flushed = provider.force_flush(int(timeout_s * 1e3) + 1000)
    finally:
        provider.shutdown()
    if not flushed or exporter.failed or exporter.sent < len(snap.findings):
        raise ExportFailed(_cause("logs", url, errors, timeout_s))
    return exporter.sent


class _Recording(LogRecordExporter):
    """A LogRecordExporter that hands every batch to ``inner`` and counts what it accepted (a
    SUCCESS over a non-2xx answer of ``session`` is a failure)."""

    def __init__(self, inner: LogRecordExporter, session: _Session):
        self.inner, self.session, self.sent, self.failed = inner, session, 0, False

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result = self.inner.export(batch)
        if result is LogRecordExportResult.SUCCESS and not self.session.refused:
            self.sent += len(batch)
        else:
            self.failed = True
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class _Collect(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@contextmanager
def _sdk_errors() -> Iterator[list[str]]:
    """What the SDK's exporters log while inside: collected (the cause of a FAILURE), kept off the
    terminal (the caller says it in one line)."""
    errors: list[str] = []
    handler = _Collect(errors)
    log = logging.getLogger(SDK_LOGGER)
    propagate = log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield errors
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


_STATUS = re.compile(r"code: (\d{3}), reason: (.*)", re.S)
# what the transport's exception text says -> the cause in words (the SDK retries these until its timeout)
_CONNECTION = (("Connection refused", "connection refused: nothing listens there"),
               ("NameResolutionError", "the host name does not resolve"),
               ("Name or service not known", "the host name does not resolve"),
               ("SSLError", "the TLS handshake failed"))
# a timeout is not named here: whether the connection or the answer timed out, _connect tells


def _http_status(errors: list[str]) -> tuple[str, str] | None:
    """(status, reason) of the last HTTP answer the SDK logged as a failure, None without one."""
    for e in reversed(errors):
        m = _STATUS.search(e)
        if m:
            return m[1], " ".join(m[2].split())[:120]
    return None


def _cause(signal: str, url: str, errors: list[str], timeout_s: float) -> str:
    """One line: the HTTP status and reason the receiver answered, else the connection's failure
    in words, else (a connection opens but the SDK gave up) that the receiver at ``url`` did not
    answer within ``timeout_s``."""
    status = _http_status(errors)
    if status:
        return f"{signal} to {url}: HTTP {status[0]} {status[1]}".rstrip()
    text = " ".join(errors)
    said = next((words for key, words in _CONNECTION if key in text), None) or _connect(url, timeout_s)
    if said is None:  # it accepts connections: the SDK's "timeout, max retries" means no answer in time
        return f"{signal}: the receiver at {url} {NO_ANSWER} {timeout_s:g} s"
    return f"{signal} to {url}: {said}"


def _connect(url: str, timeout_s: float) -> str | None:
    """Why a TCP connection to ``url``'s host and port fails, in words; None when it succeeds.
    (The SDK logs only "timeout, max retries" when its first attempt already used up the deadline.)"""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)),
                                      timeout=min(timeout_s, 2.0)):
            return None
    except ConnectionRefusedError:
        return "connection refused: nothing listens there"
    except socket.gaierror:
        return "the host name does not resolve"
    except TimeoutError:
        return f"the connection was not accepted within {min(timeout_s, 2.0):g} s"
    except OSError as exc:
        return f"cannot connect: {exc.strerror or exc}"


__all__ = ["FIX_CONNECT", "FIX_REFUSED", "FIX_TIMEOUT", "ExportFailed", "OtlpSent", "TIMEOUT_S", "deadline_s", "send",
           "stamped"]

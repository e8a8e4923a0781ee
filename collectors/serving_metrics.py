"""Serving-metrics collector: a serving engine's own Prometheus /metrics (vLLM, SGLang, Triton, TGI).

``--metrics http(s)://HOST:PORT/metrics`` scrapes the page once a second in this collector's own
thread (collectors/http_page.py: no redirects followed, at most MAX_BYTES read within TIMEOUT_S,
headers included; a page that costs
more than MAX_CPU_SHARE of a core to read spaces the next scrapes out) and keeps the
series of the metrics in catalogs/serving_fields.py, read with prometheus_client's text parser.
The page is the target's hostile input: a failed or malformed scrape is recorded, never raised into
the capture; series, buckets and labels are capped.

Stream SERVING (diagnose/bundle/streams.py): ``{"kind": "source", "t_ns", "url", "engine",
"period_s"}`` then per scrape ``{"kind": "scrape", "t_ns", "series": [{"name", "labels", "value" |
"buckets": [[le, cumulative count]], "sum", "count"}], "garbage", "garbage_lines", "other_lines",
"dropped"}``; failed scrapes as ``{"kind": "error", "t_ns", "reason"}``. ``t_ns`` is the Unix time
the page was read. The first raw page is kept as the first file of SERVING_RAW.
"""
from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any

from diagnose.bundle import BundleWriter, write_private_text
from diagnose.bundle.streams import SERVING, SERVING_RAW
from diagnose.catalogs.serving_fields import Page, engine_of, read_page
from diagnose.collectors.base import CaptureOptions, CollectorError, Probe, ThreadedCollector
from diagnose.collectors.http_page import BoundedGet, PageError
from diagnose.model import Target

PERIOD_S = 1.0
MAX_CPU_SHARE = 0.1  # a scrape that took longer than this share of the period delays the next ones
TIMEOUT_S = 2.0  # the whole GET, connect to last byte
MAX_BYTES = 4 << 20
STOP_TIMEOUT_S = TIMEOUT_S + 1.0  # the capture's end waits no longer for a scrape under way
USAGE = ("--metrics expects http(s)://HOST[:PORT][/path] or :PORT[/path] (127.0.0.1), e.g. "
         "http://127.0.0.1:8000/metrics (a vLLM, SGLang, Triton or TGI /metrics endpoint)")
NOT_REQUESTED = "not requested: pass --metrics URL of the serving engine's Prometheus /metrics"


class ScrapeError(Exception):
    """A scrape failed; the message is the reason."""


def parse_metrics_url(value: str) -> str:
    """The URL to scrape (path defaults to /metrics; ``:PORT[/path]`` means http://127.0.0.1:PORT).
    Raises ValueError naming the fix: not http(s), no host, a port that is not a number in 1..65535,
    or credentials in the URL (``user:secret@``: refused, so that they are never printed nor
    written into the bundle)."""
    value = value.strip()
    if value.startswith(":"):
        value = "http://127.0.0.1" + value
    parts = urllib.parse.urlsplit(value)
    if "@" in parts.netloc:
        raise ValueError("--metrics: credentials in the URL (user:password@) are refused, so that they are never "
                         "shown nor stored; expose the engine's /metrics without auth on a local port")
    try:
        port = parts.port  # raises ValueError on a port that is not a number in 0..65535
    except ValueError:
        port = -1
    if port == -1 or port == 0 or not re.fullmatch(r"[^:]*(:[0-9]{1,5})?|\[[^\]]*\](:[0-9]{1,5})?", parts.netloc):
        raise ValueError(f"{USAGE}; the port must be a number in 1-65535, got {value!r}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{USAGE}; got {value!r}")
    return urllib.parse.urlunsplit(parts._replace(path=parts.path or "/metrics", fragment=""))


class MetricsPage:
    """GET one /metrics page (collectors/http_page.py: http(s) only, no redirects, at most
    MAX_BYTES within TIMEOUT_S, headers included)."""

    def __init__(self, url: str):
        self.url = parse_metrics_url(url)
        self._get = BoundedGet(self.url, TIMEOUT_S, MAX_BYTES)

    def fetch(self) -> str:
        """The page's text (undecodable bytes replaced). Raises ScrapeError."""
        self._get.timeout_s = TIMEOUT_S
        try:
            body = self._get.fetch()
        except PageError as exc:
            raise ScrapeError(str(exc)) from None
        return body.decode("utf-8", errors="replace")

    def close(self) -> None:
        self._get.close()


def scrape_record(t_ns: int, dur_ns: int, page: Page) -> dict[str, Any]:
    return {"kind": "scrape", "t_ns": t_ns, "dur_ms": round(dur_ns / 1e6, 3), "series": page.series,
            "garbage": page.garbage, "garbage_lines": page.garbage_lines, "other_lines": page.other_lines,
            "dropped": page.dropped}


class ServingMetricsCollector(ThreadedCollector):
    """Scrapes in its own thread; ``stop`` waits at most STOP_TIMEOUT_S for a scrape under way (one
    GET is bounded by TIMEOUT_S, its parse by serving_fields' line caps) and otherwise ends PARTIAL,
    the scrape left to finish unrecorded."""

    name = "serving"
    period_s = PERIOD_S
    stop_timeout_s = STOP_TIMEOUT_S

    def __init__(self) -> None:
        super().__init__()
        self._page: MetricsPage | None = None
        self._scrapes = 0
        self._errors = 0
        self._garbage = 0
        self._next_ns = 0  # monotonic ns before which no scrape starts (MAX_CPU_SHARE)
        self._slowed = 0  # scrapes that cost more than MAX_CPU_SHARE of the period

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        if not options.metrics_url:
            return Probe(False, NOT_REQUESTED)
        try:
            source = MetricsPage(options.metrics_url)
            t0 = time.monotonic_ns()
            raw = source.fetch()
            page = read_page(raw)
        except (ValueError, ScrapeError) as exc:
            return Probe(False, str(exc))
        engine = engine_of(page.engine_counts())
        if engine is None:
            source.close()
            return Probe(False, f"{source.url} answered but exposes no vLLM, SGLang, Triton or TGI metric "
                                f"({page.other_lines} other sample lines, {page.garbage} malformed)")
        self._page, self._engine = source, engine.value
        self._first = (time.time_ns(), time.monotonic_ns() - t0, page, raw)
        return Probe(True)

    def _setup(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self._out = bundle.stream(SERVING.name)
        self._streams = [SERVING.name]
        source = self._probed()
        self._out.write({"kind": "source", "t_ns": time.time_ns(), "url": source.url, "engine": self._engine,
                         "period_s": PERIOD_S})
        t_ns, dur_ns, page, raw = self._first
        bundle.file_path(SERVING_RAW.directory).mkdir(mode=0o700, exist_ok=True)
        write_private_text(bundle.file_path(SERVING_RAW.file(1)), raw)
        self._streams.append(SERVING_RAW.file(1))
        self._write(t_ns, dur_ns, page)
        self._skip_first_tick = True

    def counts(self) -> dict[str, Any]:
        return {"records": self._scrapes, "errors": self._errors, "garbage_lines": self._garbage,
                "slowed": self._slowed}

    def tick(self) -> bool:
        if self._skip_first_tick:  # the probe's scrape stands for t=0
            self._skip_first_tick = False
            return True
        t0 = time.monotonic_ns()
        if t0 < self._next_ns:  # the last page cost too much: this tick is skipped
            return True
        cpu0 = time.thread_time_ns()
        try:
            page = read_page(self._probed().fetch())
        except ScrapeError as exc:
            if self._abandoned:
                return False
            self._errors += 1
            self._out.write({"kind": "error", "t_ns": time.time_ns(), "reason": str(exc)})
            self._partial_reason = f"{self._errors} scrape(s) failed, last: {exc}"
            return True
        if self._abandoned:  # stop() gave up on this scrape: the stream is closed
            return False
        self._throttle(t0, time.thread_time_ns() - cpu0)
        self._write(time.time_ns(), time.monotonic_ns() - t0, page)
        return True

    def _throttle(self, t0_ns: int, cpu_ns: int) -> None:
        """Keep this thread under MAX_CPU_SHARE of a core: a scrape that took ``cpu_ns`` of CPU
        (a huge page, a slow parse) puts the next one at least ``cpu_ns / MAX_CPU_SHARE`` later."""
        if cpu_ns > MAX_CPU_SHARE * PERIOD_S * 1e9:
            self._next_ns = t0_ns + int(cpu_ns / MAX_CPU_SHARE)
            self._slowed += 1

    def _probed(self) -> MetricsPage:
        if self._page is None:
            raise CollectorError("serving: started without a successful probe")
        return self._page

    def _write(self, t_ns: int, dur_ns: int, page: Page) -> None:
        self._out.write(scrape_record(t_ns, dur_ns, page))
        self._scrapes += 1
        self._garbage += page.garbage
        if page.garbage and not self._errors:  # a failed scrape's reason says more
            self._first_garbage = getattr(self, "_first_garbage", None) or (page.garbage_lines or ["?"])[0]
            self._partial_reason = (f"{self._garbage} malformed line(s) of engine metrics skipped, first: "
                                    f"{self._first_garbage}")

    def _teardown(self) -> None:
        if self._page is not None:
            self._page.close()


__all__ = ["MetricsPage", "NOT_REQUESTED", "ScrapeError", "ServingMetricsCollector", "parse_metrics_url",
           "scrape_record"]

"""DCGM collector: profiling counters (SM/DRAM/tensor activity) from a dcgm-exporter or nv-hostengine.

``--dcgm http(s)://HOST:PORT/metrics`` scrapes a dcgm-exporter endpoint once a second with
urllib and parses it with prometheus_client's text parser (catalogs/dcgm_fields.py).
``--dcgm dcgm://HOST[:PORT]`` reads the same fields from nv-hostengine through the DCGM Python
bindings (``DcgmReader``, shipped in /usr/local/dcgm/bindings/python3 with a DCGM install).
Only fields are read or watched; no GPU setting is changed.

Stream DCGM (diagnose/bundle/streams.py): ``{"kind": "source", "mode", "url"}`` then per scrape
``{"kind": "scrape", "t_ns", "entities": [{"uuid", "gpu", "gpu_instance_id",
"gpu_instance_profile", "model", "hostname", "values": {key: value}, "unknown": {key: reason},
"names": {key: exporter field name}}]}``; failed scrapes as ``{"kind": "error", "t_ns", "reason"}``.
``t_ns`` is the Unix time when the scrape returned (values are the exporter's latest, which it
refreshes every 30 s by default: ``dcgm-exporter -c``). The first raw scrape is kept as
the first file of DCGM_RAW.
"""
from __future__ import annotations

import os
import sys
import time
import urllib.parse
import warnings
from typing import Any

from diagnose.bundle import BundleWriter, write_private_text
from diagnose.bundle.streams import DCGM, DCGM_RAW
from diagnose.catalogs.dcgm_fields import FIELDS, new_entity, parse_exposition, put_value
from diagnose.collectors.base import CaptureOptions, CollectorError, Probe, ThreadedCollector
from diagnose.model import Target

PERIOD_S = 1.0
TIMEOUT_S = 2.0
MAX_BYTES = 8 << 20
BINDINGS_DIR = "/usr/local/dcgm/bindings/python3"
USAGE = ("--dcgm expects http(s)://HOST:PORT/metrics (a dcgm-exporter) or dcgm://HOST[:PORT] "
         "(nv-hostengine through the DCGM Python bindings)")
NOT_REQUESTED = "not requested: pass --dcgm URL of a dcgm-exporter /metrics endpoint"


class DcgmError(Exception):
    """A scrape or read failed; the message is the reason."""


def parse_dcgm_target(value: str) -> tuple[str, str]:
    """("exporter", url) or ("hostengine", "host:port"). Raises ValueError naming the fix."""
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme in ("http", "https") and parts.hostname:
        return "exporter", urllib.parse.urlunsplit(parts._replace(path=parts.path or "/metrics"))
    if parts.scheme == "dcgm":
        return "hostengine", f"{parts.hostname or 'localhost'}:{parts.port or 5555}"
    raise ValueError(f"{USAGE}; got {value!r}")


class ExporterSource:
    """GET a dcgm-exporter /metrics page."""

    mode = "dcgm-exporter"

    def __init__(self, url: str):
        import urllib.request  # http.client and friends: only when a URL is given

        self.url = url
        host = urllib.parse.urlsplit(url).hostname or ""
        # Loopback exporters are reached directly even where an http_proxy is set.
        handlers = [urllib.request.ProxyHandler({})] if host in ("127.0.0.1", "localhost", "::1") else []
        self._opener = urllib.request.build_opener(*handlers)

    def open(self) -> None:
        """Nothing to set up: each fetch is one HTTP GET."""

    def fetch(self) -> tuple[list[dict[str, Any]], str | None]:
        import urllib.error

        try:
            with self._opener.open(self.url, timeout=TIMEOUT_S) as resp:
                body = resp.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise DcgmError(f"HTTP {exc.code} from {self.url}") from None
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DcgmError(f"cannot reach {self.url}: {reason}") from None
        if len(body) > MAX_BYTES:
            raise DcgmError(f"{self.url} returned more than {MAX_BYTES >> 20} MiB")
        text = body.decode("utf-8", errors="replace")
        try:
            return parse_exposition(text), text
        except ValueError as exc:
            raise DcgmError(f"{self.url} is not Prometheus text format: {str(exc)[:120]}") from None

    def close(self) -> None:
        self._opener.close()


def import_bindings() -> tuple[Any, Any, Any]:
    """(dcgm_fields, dcgm_structs, DcgmReader class) from an installed DCGM. Raises DcgmError."""
    if os.path.isdir(BINDINGS_DIR) and BINDINGS_DIR not in sys.path:
        sys.path.append(BINDINGS_DIR)  # where DCGM installs its bindings; not on sys.path by default
    try:
        import dcgm_fields
        import dcgm_structs
        from DcgmReader import DcgmReader
    except ImportError as exc:
        raise DcgmError(f"DCGM Python bindings not importable (no module {exc.name}): install DCGM "
                        "or use a dcgm-exporter URL") from None
    return dcgm_fields, dcgm_structs, DcgmReader


class HostEngineSource:
    """The same fields read from nv-hostengine through DcgmReader (GPU entities only)."""

    mode = "nv-hostengine"

    def __init__(self, address: str):
        self.url = f"dcgm://{address}"
        self._address = address
        self._reader: Any = None

    def open(self) -> None:
        fields_mod, structs, reader_cls = import_bindings()
        self._structs = structs
        self._names: dict[int, str] = {}
        with warnings.catch_warnings():  # DCGM 4.6 warns on the pre-rename names
            warnings.simplefilter("ignore", DeprecationWarning)
            for f in FIELDS:
                for name in f.names:
                    fid = getattr(fields_mod, name, None)
                    if isinstance(fid, int):
                        self._names.setdefault(fid, name)
        try:
            self._reader = reader_cls(hostname=self._address, fieldIds=sorted(self._names),
                                      updateFrequency=int(PERIOD_S * 1e6), ignoreBlank=False)
            self._reader.Init()
        except structs.DCGMError as exc:
            raise DcgmError(f"nv-hostengine at {self._address}: {exc}") from None

    def fetch(self) -> tuple[list[dict[str, Any]], str | None]:
        try:
            data = self._reader.GetLatestGpuValuesAsFieldIdDict()
        except self._structs.DCGMError as exc:
            raise DcgmError(f"nv-hostengine at {self._address}: {exc}") from None
        uuids = getattr(self._reader, "m_gpuIdToUUId", {})
        entities = []
        for gpu_id, values in data.items():
            ent = new_entity({"uuid": uuids.get(gpu_id), "gpu": str(gpu_id)})
            for fid, value in values.items():
                if fid in self._names and isinstance(value, (int, float)):
                    put_value(ent, self._names[fid], float(value))
            entities.append(ent)
        return entities, None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.Shutdown()


def make_source(value: str) -> ExporterSource | HostEngineSource:
    mode, where = parse_dcgm_target(value)
    return ExporterSource(where) if mode == "exporter" else HostEngineSource(where)


class DcgmCollector(ThreadedCollector):
    name = "dcgm"
    period_s = PERIOD_S

    def __init__(self) -> None:
        super().__init__()
        self._source: ExporterSource | HostEngineSource | None = None
        self._scrapes = 0
        self._errors = 0

    def probe(self, target: Target, options: CaptureOptions) -> Probe:
        if not options.dcgm_url:
            return Probe(False, NOT_REQUESTED)
        try:
            source = make_source(options.dcgm_url)
            source.open()
            first = source.fetch()
        except (ValueError, DcgmError) as exc:
            return Probe(False, str(exc))
        if not first[0]:
            source.close()
            return Probe(False, f"{source.url} answered but exposes no DCGM GPU field; is it a dcgm-exporter?")
        self._source, self._first = source, (time.time_ns(), *first)
        return Probe(True)

    def _setup(self, target: Target, options: CaptureOptions, bundle: BundleWriter) -> None:
        self._out = bundle.stream(DCGM.name)
        self._streams = [DCGM.name]
        source = self._probed()
        self._out.write({"kind": "source", "t_ns": time.time_ns(), "mode": source.mode, "url": source.url})
        t_ns, entities, raw = self._first
        if raw is not None:
            raw_dir = bundle.file_path(DCGM_RAW.directory)
            raw_dir.mkdir(mode=0o700, exist_ok=True)
            write_private_text(bundle.file_path(DCGM_RAW.file(1)), raw)
            self._streams.append(DCGM_RAW.file(1))
        self._write(t_ns, entities)
        self._skip_first_tick = True

    def counts(self) -> dict[str, Any]:
        return {"records": self._scrapes, "errors": self._errors}

    def tick(self) -> bool:
        if self._skip_first_tick:  # the probe's scrape stands for t=0
            self._skip_first_tick = False
            return True
        try:
            entities, _ = self._probed().fetch()
        except DcgmError as exc:
            self._errors += 1
            self._out.write({"kind": "error", "t_ns": time.time_ns(), "reason": str(exc)})
            self._partial_reason = f"{self._errors} scrape(s) failed, last: {exc}"
            return True
        self._write(time.time_ns(), entities)
        return True

    def _probed(self) -> ExporterSource | HostEngineSource:
        """The source a successful probe opened."""
        if self._source is None:
            raise CollectorError("dcgm: started without a successful probe")
        return self._source

    def _write(self, t_ns: int, entities: list[dict[str, Any]]) -> None:
        self._out.write({"kind": "scrape", "t_ns": t_ns, "entities": entities})
        self._scrapes += 1

    def _teardown(self) -> None:
        if self._source is not None:
            self._source.close()


__all__ = ["DcgmCollector", "DcgmError", "ExporterSource", "HostEngineSource", "NOT_REQUESTED",
           "make_source", "parse_dcgm_target"]

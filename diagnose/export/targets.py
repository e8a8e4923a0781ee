"""Where an export goes, as ``--export`` spells it: ``otlp=URL``, ``prometheus=FILE``,
``prometheus=:PORT`` or ``prometheus=HOST:PORT``. Pure parsing; a bad spec is a ValueError whose
message names the fix (the CLI turns it into a usage error, exit 2, before any target is touched)."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# the resource keys diagnose derives (export/snapshot.py resource_attributes)
DERIVED_KEYS = ("service.name", "host.name", "process.pid", "rank")
DEFAULT_HOST = "127.0.0.1"  # nothing listens beyond loopback unless HOST is given
_SIGNAL_PATH = re.compile(r"/v1/(?:metrics|logs|traces)/?$")
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.\-]*)):(?P<port>[0-9]{1,5})$")
_BAD_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_ATTR_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$")


class ExportKind(str, Enum):
    OTLP = "otlp"  # OTLP/HTTP protobuf metrics and logs (opentelemetry-exporter-otlp-proto-http)
    PROMETHEUS_FILE = "prometheus-file"  # text exposition written to FILE (a node_exporter textfile)
    PROMETHEUS_HTTP = "prometheus-http"  # text exposition served on HOST:PORT/metrics


@dataclass(frozen=True)
class ExportTarget:
    """One ``--export``: ``spec`` as typed; ``url`` the OTLP base (``/v1/metrics`` and ``/v1/logs``
    are appended); ``path`` the Prometheus file; ``host``/``port`` the Prometheus listener."""

    kind: ExportKind
    spec: str
    url: str = ""
    path: Path | None = None
    host: str = DEFAULT_HOST
    port: int = 0


def parse_otlp(spec: str, value: str) -> ExportTarget:
    """``otlp=http://HOST:4318`` (an OTLP/HTTP receiver's base URL; a signal path such as
    ``/v1/metrics`` is accepted and dropped). Raises ValueError."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{spec!r}: expected otlp=http(s)://HOST:PORT, e.g. otlp=http://127.0.0.1:4318")
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when asked
    except ValueError:
        raise ValueError(f"{spec!r}: the port is not a number in 0-65535") from None
    path = _SIGNAL_PATH.sub("", parts.path).rstrip("/")
    return ExportTarget(ExportKind.OTLP, spec, url=urlunsplit((parts.scheme, parts.netloc, path, "", "")))


def parse_prometheus(spec: str, value: str) -> ExportTarget:
    """``prometheus=:PORT`` / ``HOST:PORT`` (serve; host 127.0.0.1 by default) or ``prometheus=FILE``
    (anything else: a path; a bare number is refused as ambiguous, ``./9464`` names a file). Raises
    ValueError."""
    m = _HOST_PORT.match(value)
    if m:
        port = int(m["port"])
        if not 0 < port <= 65535:
            raise ValueError(f"{spec!r}: the port must be in 1-65535")
        return ExportTarget(ExportKind.PROMETHEUS_HTTP, spec, host=m["v6"] or m["host"] or DEFAULT_HOST, port=port)
    if value.isdigit():  # a bare port would otherwise be a file of that name in the cwd
        raise ValueError(f"{spec!r}: did you mean prometheus=:{value} (serve) or prometheus=./{value} (a file)?")
    if not value or value.endswith("/"):
        raise ValueError(f"{spec!r}: expected prometheus=FILE, prometheus=:PORT or prometheus=HOST:PORT")
    return ExportTarget(ExportKind.PROMETHEUS_FILE, spec, path=Path(value))


# the schemes ``--export`` takes, declared once
SCHEMES: dict[str, Callable[[str, str], ExportTarget]] = {"otlp": parse_otlp, "prometheus": parse_prometheus}


def parse_export(spec: str) -> ExportTarget:
    """One ``--export SCHEME=WHERE``. Raises ValueError naming the schemes."""
    scheme, sep, value = spec.partition("=")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"{spec!r}: expected SCHEME=WHERE with SCHEME one of {', '.join(SCHEMES)}, "
                         "e.g. otlp=http://127.0.0.1:4318 or prometheus=:9464")
    return SCHEMES[scheme](spec, value.strip())


EXPORTER_PACKAGE = "opentelemetry-exporter-otlp-proto-http"


def otlp_missing() -> str | None:
    """None when the OTLP/HTTP exporter (the ``export`` extra) is installed, else the line that
    says how to install it."""
    import importlib.util

    try:
        found = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:
        found = False
    return None if found else f"otlp export needs {EXPORTER_PACKAGE}: pip install 'diagnose[export]'"


def parse_attr(text: str) -> tuple[str, str]:
    """One ``--export-attr KEY=VALUE`` resource attribute (e.g. ``job.id=4711``). Raises ValueError
    (no ``=``, a KEY not of letters, digits, ``_``, ``.``, ``-``, a KEY starting with ``__``:
    Prometheus reserves those label names)."""
    key, sep, value = text.partition("=")
    if not sep or not _ATTR_KEY.match(key):
        raise ValueError(f"{text!r}: expected KEY=VALUE with KEY of letters, digits, '_', '.', '-', e.g. job.id=4711")
    if key.startswith("__"):
        raise ValueError(f"{text!r}: keys starting with '__' are reserved by Prometheus; rename it without "
                         "the leading '__'")
    return key, value


def label_name(key: str) -> str:
    """An attribute key as a Prometheus label name: ``service.name`` -> ``service_name``."""
    out = _BAD_LABEL.sub("_", key)
    return "_" + out if out[:1].isdigit() else out


def label_conflict(keys: Iterable[str]) -> str | None:
    """Why resource attribute ``keys`` cannot all be Prometheus labels of ``target_info``, in one
    line naming the fix; None when they can. A key whose label name starts with ``__`` is
    reserved; two keys whose label names are the same (``job.id``, ``job_id``, ``job-id``) would be
    one label, a value lost."""
    seen: dict[str, str] = {}
    for key in keys:
        label = label_name(key)
        if label.startswith("__"):
            return f"resource attribute {key!r}: label names starting with '__' are reserved by Prometheus; rename it"
        if label in seen and seen[label] != key:
            return (f"resource attributes {seen[label]!r} and {key!r} are both the Prometheus label {label!r}; "
                    "rename or drop one")
        seen[label] = key
    return None


__all__ = ["DEFAULT_HOST", "DERIVED_KEYS", "EXPORTER_PACKAGE", "ExportKind", "ExportTarget", "SCHEMES",
           "label_conflict", "label_name", "otlp_missing", "parse_attr", "parse_export", "parse_otlp",
           "parse_prometheus"]

"""Prometheus text exposition of a Snapshot through prometheus_client: a CollectorRegistry with one
custom collector, written to a file (``prometheus=FILE``, for node_exporter's textfile collector)
or served on HOST:PORT/metrics (``prometheus=:PORT``) with prometheus_client's own server.

Names follow the OTel-to-Prometheus translation: dots become ``_``, the unit a suffix (``s`` ->
``_seconds``, ``1`` -> ``_ratio``, ``By`` -> ``_bytes``, ``{request}/s`` -> ``_per_second``).
The resource is ``target_info`` (one sample, its attributes as labels, as OTel's Prometheus
exporter writes it); each finding is a ``diagnose_finding_info`` sample, its evidence
``diagnose_finding_evidence`` samples. No sample carries a timestamp: a scrape is "now".

The file is written with diagnose's own private-file helper (diagnose/bundle/files.py): atomic
(a fresh temp file + rename), mode 0600, never through a symlink, a FIFO or device refused.
prometheus_client's ``write_to_textfile`` is not used for it: its temporary name is predictable
(``FILE.<pid>.<thread id>``) and opened following symlinks with the umask's mode, which root must
not do in a directory another user can write.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from diagnose.export.snapshot import Point, Snapshot
from diagnose.export.targets import label_name

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import CollectorRegistry

_UNIT_SUFFIX = {"s": "seconds", "1": "ratio", "By": "bytes"}
_BAD = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(name: str, unit: str) -> str:
    """The Prometheus name of an OTel metric: ``diagnose.request.duration`` (s) ->
    ``diagnose_request_duration_seconds``; ``{request}/s`` -> ``..._per_second``; ``{finding}`` -> none."""
    base = _BAD.sub("_", name)
    if unit.endswith("/s"):
        return base + "_per_second"
    suffix = _UNIT_SUFFIX.get(unit)
    return f"{base}_{suffix}" if suffix else base




class SnapshotCollector:
    """A prometheus_client custom collector yielding one Snapshot (fixed values, collected on every
    scrape or write)."""

    def __init__(self, snap: Snapshot):
        self.snap = snap

    def collect(self) -> Iterator[object]:
        from prometheus_client.core import GaugeMetricFamily

        labels: dict[str, str] = {}  # the CLI refuses reserved and colliding keys (targets.label_conflict);
        for k, v in self.snap.resource.items():  # one that got here anyway is left out, never an invalid page
            label = label_name(k)
            if not label.startswith("__") and label not in labels:
                labels[label] = str(v)
        info = GaugeMetricFamily("target_info", "the captured process (OTel resource attributes)",
                                 labels=list(labels))
        info.add_metric(list(labels.values()), 1.0)
        yield info
        evidence = [p for f in self.snap.findings for p in f.evidence_points]
        yield from _families([*self.snap.points, *evidence])
        findings = GaugeMetricFamily("diagnose_finding_info", "a rule that fired (1 per finding)",
                                     labels=["rule_id", "severity", "layer", "quadrant", "title"])
        for f in self.snap.findings:
            findings.add_metric([f.rule_id, f.severity.value, f.layer, f.quadrant, f.title], 1.0)
        yield findings


def _families(points: list[Point]) -> Iterator[object]:
    """One gauge family per metric name, its points as samples (attributes as labels)."""
    from prometheus_client.core import GaugeMetricFamily

    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(metric_name(p.name, p.unit), []).append(p)
    for name, pts in groups.items():
        keys = list(dict.fromkeys(k for p in pts for k, _ in p.attributes))
        fam = GaugeMetricFamily(name, pts[0].description, labels=[label_name(k) for k in keys])  # the unit: name
        seen: set[tuple[str, ...]] = set()
        for p in pts:
            attrs = dict(p.attributes)
            values = tuple(attrs.get(k, "") for k in keys)
            if values not in seen:  # a duplicate series would fail the whole scrape
                seen.add(values)
                fam.add_metric(list(values), p.value)
        yield fam


def registry(snap: Snapshot) -> CollectorRegistry:
    """A fresh CollectorRegistry holding only ``snap`` (no process or platform collectors)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(snap))  # type: ignore[arg-type]  # duck-typed Collector
    return reg


def exposition(snap: Snapshot) -> bytes:
    """``snap`` in the Prometheus text format (version 0.0.4), as a scrape returns it."""
    from prometheus_client import generate_latest

    return generate_latest(registry(snap))


def write_file(path: Path, snap: Snapshot) -> None:
    """Write the exposition to ``path``: atomically, mode 0600. Raises OSError: ELOOP when ``path``
    is a symlink, EINVAL when it is a FIFO, device or directory, what the write raises otherwise."""
    from diagnose.bundle.files import open_dir, write_private_bytes

    body = exposition(snap)
    parent = open_dir(path.parent)
    try:
        try:
            mode = os.lstat(path.name, dir_fd=parent).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "a symlink; refusing to replace it", str(path))
        write_private_bytes(path.name, body, parent)  # refuses a FIFO, a device, a directory
    finally:
        os.close(parent)


def serve(host: str, port: int, snap: Snapshot) -> WSGIServer:
    """Serve the exposition on http://HOST:PORT/metrics with prometheus_client's ``start_http_server``
    (a daemon thread). Returns the server: ``shutdown()`` and ``server_close()`` end it. Raises
    OSError (address in use, not an address of this host)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry(snap))
    return server


__all__ = ["SnapshotCollector", "exposition", "label_name", "metric_name", "registry", "serve", "write_file"]

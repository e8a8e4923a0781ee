"""Exports from the results view: any registered renderer that declares a key, written 0600."""
from __future__ import annotations

from pathlib import Path

from diagnose.bundle import write_private_bytes
from diagnose.model import Report
from diagnose.render import RENDERERS, renderer


def export_path(bundle_path: Path, fmt: str, extension: str, export_dir: Path) -> Path:
    """``<export_dir>/<bundle name>-<fmt><ext>``: one file per bundle and format, never in the bundle
    itself (a bundle may be read-only, e.g. a fixture)."""
    return export_dir / f"{bundle_path.name}-{fmt}{extension}"


def export(report: Report, fmt: str, export_dir: Path) -> Path:
    """Render ``report`` as ``fmt`` and write the file. Raises UnknownFormat (a KeyError) or
    OSError (export_dir not writable)."""
    r = renderer(fmt)
    path = export_path(report.bundle.path, fmt, r.extension, export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    body = r.render(report)
    write_private_bytes(path, body if isinstance(body, bytes) else body.encode("utf-8", errors="backslashreplace"),
                        own_name=False)
    return path


def export_keys() -> tuple[tuple[str, str, str], ...]:
    """(key, format, footer title) for every registered renderer with a TUI key, in registry order."""
    return tuple((r.tui_key, fmt, r.title) for fmt, r in RENDERERS.items() if r.tui_key)

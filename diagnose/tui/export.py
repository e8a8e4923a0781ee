"""Exports from the results view (keys e/j/p): any registered renderer, written 0600."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from diagnose.bundle import write_private_text
from diagnose.model import Analysis
from diagnose.render import RENDERERS


def export_path(bundle_path: Path, fmt: str, extension: str, export_dir: Path) -> Path:
    """``<export_dir>/<bundle name>-<fmt><ext>``: one file per bundle and format, never in the bundle
    itself (a bundle may be read-only, e.g. a fixture)."""
    return export_dir / f"{bundle_path.name}-{fmt}{extension}"


def export(analysis: Analysis, manifest: dict[str, Any], bundle_path: Path, fmt: str,
           export_dir: Path) -> Path:
    """Render with ``RENDERERS[fmt]`` and write the file. Raises KeyError (no such renderer) or
    OSError (export_dir not writable)."""
    renderer = RENDERERS[fmt]()
    path = export_path(bundle_path, fmt, renderer.extension, export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    write_private_text(path, renderer.render(analysis, manifest))
    return path


def available(fmt: str) -> bool:
    return fmt in RENDERERS

"""Renderer registry: a renderer has a format name, a file extension and render(analysis, manifest)."""
from __future__ import annotations

from diagnose.render.base import Renderer
from diagnose.render.findings_json import JsonRenderer
from diagnose.render.markdown.report import MarkdownRenderer

RENDERERS: dict[str, type[Renderer]] = {r.format: r for r in (MarkdownRenderer, JsonRenderer)}

__all__ = ["RENDERERS", "Renderer"]

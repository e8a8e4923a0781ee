"""Renderer registry: every output format, declared once. The CLI (`report -f`, `analyze
--format`), the TUI's export keys and the bundle's own documents all pick from ``RENDERERS``."""
from __future__ import annotations

from diagnose.model import Report
from diagnose.render.base import Renderer
from diagnose.render.findings_json import JsonRenderer
from diagnose.render.markdown.report import FullMarkdownRenderer, MarkdownRenderer
from diagnose.render.perfetto import PerfettoRenderer
from diagnose.render.speedscope import SpeedscopeRenderer

RENDERERS: dict[str, type[Renderer]] = {r.format: r for r in (MarkdownRenderer, FullMarkdownRenderer, JsonRenderer,
                                                              SpeedscopeRenderer, PerfettoRenderer)}


class UnknownFormat(KeyError):
    """No renderer of that name; the message lists the registered ones."""

    def __str__(self) -> str:
        return f"unknown format {self.args[0]!r}; choose one of {', '.join(sorted(RENDERERS))}"


def renderer(fmt: str) -> Renderer:
    """The renderer registered as ``fmt``. Raises UnknownFormat."""
    try:
        return RENDERERS[fmt]()
    except KeyError:
        raise UnknownFormat(fmt) from None


def render(report: Report, fmt: str) -> str | bytes:
    """``report`` as the document of format ``fmt``. Raises UnknownFormat."""
    return renderer(fmt).render(report)


__all__ = ["RENDERERS", "Renderer", "UnknownFormat", "render", "renderer"]

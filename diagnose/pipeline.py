"""After a capture (or on demand): analyse a bundle and write findings.json and report.md into it."""
from __future__ import annotations

from pathlib import Path

from diagnose.verdict.analyze import analyze
from diagnose.bundle import FINDINGS, REPORT, Bundle, write_private_text
from diagnose.model import Analysis
from diagnose.render import RENDERERS


def analyze_and_write(path: Path, overrides: dict[str, float] | None = None,
                      write: bool = True) -> tuple[Bundle, Analysis]:
    """Analyse the bundle at ``path``; with ``write`` store findings.json and report.md beside it.

    Raises BundleError (not a bundle), ThresholdError (bad override), OSError (cannot write).
    """
    bundle = Bundle.open(path)
    analysis = analyze(bundle, overrides)
    if write:
        for name, text in documents(bundle, analysis).items():
            write_private_text(bundle.path / name, text)
    return bundle, analysis


def documents(bundle: Bundle, analysis: Analysis) -> dict[str, str]:
    """The bundle's generated files, rendered: {findings.json: ..., report.md: ...}."""
    return {FINDINGS: RENDERERS["json"]().render(analysis, bundle.manifest),
            REPORT: RENDERERS["md"]().render(analysis, bundle.manifest)}

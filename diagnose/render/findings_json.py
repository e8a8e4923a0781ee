"""findings.json: the analysis plus the capture's identity (target, time, collector states)."""
from __future__ import annotations

import json

from diagnose import __version__
from diagnose.model import Report
from diagnose.render.base import Renderer


class JsonRenderer(Renderer):
    format = "json"
    extension = ".json"
    title = "JSON"
    description = "findings.json: verdict, findings with evidence, signals, tables (machine-readable)"
    tui_key = "j"

    def render(self, report: Report) -> str:
        analysis, manifest = report.analysis, report.manifest
        doc = {
            "schema_version": manifest.get("schema_version"),
            "tool_version": __version__,
            "target": manifest.get("target"),
            "capture": {k: manifest.get(k) for k in ("started_ns", "ended_ns", "end_reason", "partial")},
            "collectors": manifest.get("collectors", []),
            **analysis.to_json(),
        }
        return json.dumps(doc, indent=2, default=str) + "\n"

"""findings.json: the analysis plus the capture's identity (target, time, collector states)."""
from __future__ import annotations

import json
from typing import Any

from diagnose import __version__
from diagnose.model import Analysis
from diagnose.render.base import Renderer


class JsonRenderer(Renderer):
    format = "json"
    extension = ".json"

    def render(self, analysis: Analysis, manifest: dict[str, Any]) -> str:
        doc = {
            "schema_version": manifest.get("schema_version"),
            "tool_version": __version__,
            "target": manifest.get("target"),
            "capture": {k: manifest.get(k) for k in ("started_ns", "ended_ns", "end_reason", "partial")},
            "collectors": manifest.get("collectors", []),
            **analysis.to_json(),
        }
        return json.dumps(doc, indent=2, default=str) + "\n"

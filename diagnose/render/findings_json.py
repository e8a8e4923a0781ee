"""findings.json: the analysis plus the capture's identity (target, time, collector states).

Its shape is the JSON Schema shipped beside this module (``findings-v1.schema.json``, version in
``findings_schema_version``); tests/render/test_findings_schema.py validates every fixture's."""
from __future__ import annotations

import json
from typing import Any

from diagnose import __version__
from diagnose.bundle.writer import finite_json
from diagnose.model import Report
from diagnose.render.base import Renderer

FINDINGS_SCHEMA_VERSION = 1
SCHEMA_FILE = f"findings-v{FINDINGS_SCHEMA_VERSION}.schema.json"


def findings_schema() -> dict[str, Any]:
    """The JSON Schema of findings.json (shipped in the package)."""
    from importlib.resources import files

    schema: dict[str, Any] = json.loads(files("diagnose.render").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))
    return schema


class JsonRenderer(Renderer):
    format = "json"
    extension = ".json"
    title = "JSON"
    description = "findings.json: verdict, findings with evidence, signals, tables (machine-readable)"
    tui_key = "j"

    def render(self, report: Report) -> str:
        analysis, manifest = report.analysis, report.manifest
        doc = {
            "findings_schema_version": FINDINGS_SCHEMA_VERSION,
            "schema_version": manifest.get("schema_version"),
            "tool_version": __version__,
            "target": manifest.get("target"),
            "capture": {k: manifest.get(k) for k in ("started_ns", "ended_ns", "end_reason", "partial", "cost", "host",
                                                   "budget") if k in manifest or k not in ("cost", "host", "budget")},
            "collectors": manifest.get("collectors", []),
            **analysis.to_json(),
        }
        return json.dumps(finite_json(doc), indent=2, default=str) + "\n"

"""``manifest.json``: who was captured, when, how it ended, and what every collector did.

``Manifest.build`` is the one constructor of a new manifest (the live capture and the importers
both use it); ``Manifest.from_json`` reads one back after ``manifest_problem`` has checked the
shape analysis relies on. Standard library only: the in-target agent imports this package.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from diagnose import __version__
from diagnose.bundle.errors import BundleError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


class CollectorState(str, Enum):
    RUNNING = "running"
    OK = "ok"
    PARTIAL = "partial"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


@dataclass
class CollectorStatus:
    """What one collector did; stored in ``manifest.json`` under ``collectors``."""

    name: str
    state: CollectorState
    reason: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    streams: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = self.state.value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CollectorStatus:
        return cls(
            name=data["name"],
            state=CollectorState(data.get("state", "failed")),
            reason=data.get("reason"),
            counts=dict(data.get("counts") or {}),
            streams=list(data.get("streams") or []),
        )


def tool_identity() -> dict[str, str]:
    """This tool's name, version and Python, as every manifest records them."""
    return {"name": "diagnose", "version": __version__, "python": sys.version.split()[0]}


# Keys of manifest.json in the order they are written; anything else is kept in ``extra``.
_KEYS = ("schema_version", "tool", "target", "options", "command", "imported_at_ns", "started_ns",
         "ended_ns", "end_reason", "partial", "collectors")


@dataclass(frozen=True)
class Manifest:
    """The typed content of ``manifest.json``. Times are Unix-epoch ns (None: not known yet, e.g.
    ``ended_ns`` while capturing, or imported files that carry no wall-clock time)."""

    target: Mapping[str, Any]
    collectors: tuple[CollectorStatus, ...]
    started_ns: int | None
    ended_ns: int | None
    end_reason: str | None
    partial: bool
    options: Mapping[str, Any] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    tool: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int | None = SCHEMA_VERSION
    imported_at_ns: int | None = None  # set by the importers: when the files became a bundle
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know, kept

    @classmethod
    def build(cls, *, target: Mapping[str, Any], collectors: Iterable[CollectorStatus],
              started_ns: int | None, ended_ns: int | None, end_reason: str, partial: bool,
              options: Mapping[str, Any] | None = None, command: Iterable[str] | None = None,
              imported_at_ns: int | None = None, extra: Mapping[str, Any] | None = None) -> Manifest:
        """A new manifest of this tool and schema version; ``command`` defaults to ``sys.argv``.
        ``extra``: further top-level keys (the capture's ``host`` facts and ``cost``)."""
        return cls(target=dict(target), collectors=tuple(collectors), started_ns=started_ns,
                   ended_ns=ended_ns, end_reason=end_reason, partial=partial,
                   options=dict(options or {}), command=tuple(sys.argv if command is None else command),
                   tool=tool_identity(), schema_version=SCHEMA_VERSION, imported_at_ns=imported_at_ns,
                   extra=dict(extra or {}))

    @property
    def by_collector(self) -> dict[str, CollectorStatus]:
        return {c.name: c for c in self.collectors}

    def problem(self) -> str | None:
        """Why this manifest could not be read back (e.g. a time out of range), or None."""
        return manifest_problem(self.to_json())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": self.schema_version, "tool": dict(self.tool), "target": dict(self.target),
            "options": dict(self.options), "command": list(self.command),
        }
        if self.imported_at_ns is not None:
            out["imported_at_ns"] = self.imported_at_ns
        out.update({
            "started_ns": self.started_ns, "ended_ns": self.ended_ns, "end_reason": self.end_reason,
            "partial": self.partial, "collectors": [c.to_json() for c in self.collectors],
        })
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """Raises BundleError when ``data`` fails ``manifest_problem``; other fields of an older or
        hand-edited manifest are read leniently (a wrong type becomes empty)."""
        problem = manifest_problem(data)
        if problem:
            raise BundleError(problem)
        command = data.get("command")
        reason = data.get("end_reason")
        imported = data.get("imported_at_ns")
        version = data.get("schema_version")
        return cls(
            target=dict(data.get("target") or {}),
            collectors=tuple(CollectorStatus.from_json(c) for c in data.get("collectors", [])),
            started_ns=data.get("started_ns"), ended_ns=data.get("ended_ns"),
            end_reason=reason if isinstance(reason, str) else None,
            partial=bool(data.get("partial", False)),
            options=_mapping(data.get("options")), tool=_mapping(data.get("tool")),
            command=tuple(str(c) for c in command) if isinstance(command, list) else (),
            schema_version=version if _is_int(version) else None,
            imported_at_ns=imported if _is_int(imported) else None,
            extra={k: v for k, v in data.items() if k not in _KEYS},
        )


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def manifest_problem(m: Any) -> str | None:
    """Why a decoded manifest cannot be used, or None. Only the shape analysis relies on."""
    if not isinstance(m, dict):
        return "not a JSON object"
    collectors, target = m.get("collectors", []), m.get("target", {})
    if not isinstance(collectors, list):
        return "'collectors' is not a list"
    for c in collectors:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            return "a collector entry has no name"
        state = c.get("state", "failed")
        if not isinstance(state, str) or state not in _STATES:
            return f"collector {c['name']!r} has an unknown state {state!r}"
        if not isinstance(c.get("counts") or {}, dict):
            return f"collector {c['name']!r} has counts that are not an object"
    for key in ("started_ns", "ended_ns"):
        v = m.get(key)
        if v is not None and (not _is_int(v) or not 0 <= v < 2**63):
            return f"'{key}' is not a Unix time in ns"
    if not isinstance(target, dict):
        return "'target' is not an object"
    if not _strings(m.get("command") or []):
        return "'command' is not a list of strings"
    if not _strings(target.get("cmdline") or []):
        return "'target.cmdline' is not a list of strings"
    return None


_STATES = frozenset(s.value for s in CollectorState)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


__all__ = ["MANIFEST", "SCHEMA_VERSION", "CollectorState", "CollectorStatus", "Manifest",
           "manifest_problem", "tool_identity"]

"""The agent's replies as the attach side reads them: written by the target, so hostile until checked.

``protocol.read_message`` guarantees one JSON object of at most 64 KiB. ``checked`` guarantees that
the fields diagnose reads (collectors/agent.py, client.py) have the types it reads them as, so
that code can index them without guarding every access: ``ok`` a bool; when false an ``error``
object with string ``code`` and ``message``; ``state``, ``out_dir``, ``note`` strings and ``pid`` an
integer when present; a ``report`` (when present) an object whose ``parts`` map names to objects
with a string ``state``, a ``reason`` (string or null) and ``counts`` of numbers, strings, objects of
numbers, or lists (at most MAX_COUNT_ITEMS) of numbers or of such lists (time ranges, the keep
fraction's history). Unknown fields are left alone (a newer agent may add some).
"""
from __future__ import annotations

from typing import Any

from diagnose.agent.inproc.protocol import BAD_REQUEST, ProtocolError

_SCALAR = (str, int, float, bool, type(None))
MAX_COUNT_ITEMS = 1024  # a list in the counts (drop ranges, keep-fraction history) is short: the agent bounds it
_OPTIONAL = {"state": str, "out_dir": str, "note": str, "pid": int}


def checked(reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` itself when its shape is the protocol's. Raises ProtocolError naming the field."""
    if not isinstance(reply.get("ok"), bool):
        _bad("'ok' is not true or false")
    if not reply["ok"]:
        err = reply.get("error")
        if not (isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str)):
            _bad("a refusal without an error code and message")
    for key, kind in _OPTIONAL.items():
        value = reply.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            _bad(f"{key!r} is not a {kind.__name__}")
    if reply.get("report") is not None:
        _check_report(reply["report"])
    return reply


def _check_report(report: Any) -> None:
    if not isinstance(report, dict):
        _bad("'report' is not an object")
    parts = report.get("parts", {})
    if not isinstance(parts, dict):
        _bad("'report.parts' is not an object")
    for name, part in parts.items():
        if not isinstance(part, dict):
            _bad(f"report part {name[:40]!r} is not an object")
        if not isinstance(part.get("state"), str) or not isinstance(part.get("reason", 0), (str, type(None))):
            _bad(f"report part {name[:40]!r} has no string state and reason")
        counts = part.get("counts") or {}
        if not isinstance(counts, dict) or not all(_count_value(v) for v in counts.values()):
            _bad(f"report part {name[:40]!r} has counts that are not numbers")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count_value(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(v, (int, float)) for v in value.values())
    if isinstance(value, list):
        return len(value) <= MAX_COUNT_ITEMS and all(
            _number(v) or (isinstance(v, list) and len(v) <= MAX_COUNT_ITEMS and all(_number(x) for x in v))
            for v in value)
    return isinstance(value, _SCALAR)


def _bad(what: str) -> None:
    raise ProtocolError(BAD_REQUEST, f"the agent's reply breaks the protocol: {what}")

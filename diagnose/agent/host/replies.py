"""The agent's replies as the attach side reads them: written by the target, so hostile until checked.

``protocol.read_message`` guarantees one JSON object of at most 64 KiB. ``reply_of`` decodes it into
a ``Reply`` (msgspec) whose fields diagnose reads (collectors/agent.py, client.py) have the types
it reads them as: ``ok`` a bool; when false an ``error`` with string ``code`` and ``message``;
``state``, ``out_dir``, ``note`` strings and ``pid`` an integer when present; a ``report`` (when
present) whose ``parts`` map names to a string ``state``, a ``reason`` (string or null, never
absent) and ``counts`` of numbers, strings, objects of numbers, or lists (at most MAX_COUNT_ITEMS)
of numbers or of such lists (time ranges, the keep fraction's history). Unknown fields are left
alone (a newer agent may add some). A reply of another shape raises ProtocolError naming the field
(with several wrong, the first in the reply's own order). ``checked`` is the same check for the
readers that still take the decoded dict (collectors/agent.py).
"""
from __future__ import annotations

from typing import Annotated, Any, NoReturn

import msgspec
from msgspec import Meta, Struct

from diagnose.agent.inproc.protocol import BAD_REQUEST, ProtocolError
from diagnose.bundle.records.base import lenient

MAX_COUNT_ITEMS = 1024  # a list in the counts (drop ranges, keep-fraction history) is short: the agent bounds it
_OPTIONAL = {"state": str, "out_dir": str, "note": str, "pid": int}
_Numbers = Annotated[list[float], Meta(max_length=MAX_COUNT_ITEMS)]
# One count: a scalar, an object of numbers (bools count, as JSON's true is a number to Python), or a
# bounded list of numbers or of bounded lists of numbers (msgspec's float takes ints, never bools).
CountValue = str | int | float | bool | None | dict[str, int | float | bool] | Annotated[
    list[float | _Numbers], Meta(max_length=MAX_COUNT_ITEMS)]


class ReplyError(Struct):
    """Why the agent refused or failed a request (protocol.py error codes)."""

    code: str
    message: str


class ReportPart(Struct):
    """One part of the agent's capture report (spans, gc, torch)."""

    state: str
    reason: str | None
    counts: dict[str, CountValue] = {}


class Report(Struct):
    parts: dict[str, ReportPart] = {}


class Reply(Struct):
    """One checked reply; ``error`` on a refusal only (an accepted reply's is not read)."""

    ok: bool
    error: ReplyError | None = None
    state: str | None = None
    out_dir: str | None = None
    note: str | None = None
    pid: int | None = None
    report: Report | None = None

    @property
    def refusal(self) -> str:
        """The refusal's message ("" for an accepted reply)."""
        return self.error.message if self.error is not None else ""


class Hello(Struct):
    """What ``hello`` says of the agent and its target, read leniently (``hello_of``): a field of the
    wrong type is unknown (None, False, empty), so one odd field never costs the agent."""

    pid: int | None = None
    agent_version: str | None = None
    protocol: int | None = None
    python: str | None = None
    torch: str | None = None  # its version when the target imported torch
    opentelemetry: str | None = None  # the API's version when the target imported it
    spans_attached: bool = False
    capabilities: tuple[str, ...] = ()


def hello_of(raw: dict[str, Any]) -> Hello:
    """The Hello of a checked ``hello`` reply (the decoded message)."""
    return lenient(Hello, raw) or Hello()


class _Head(Struct):
    ok: bool
    error: Any = None


class _Body(Struct):
    state: str | None = None
    out_dir: str | None = None
    note: str | None = None
    pid: int | None = None
    report: Any = None


def reply_of(raw: dict[str, Any]) -> Reply:
    """The typed reply of the decoded message ``raw``. Raises ProtocolError naming the field."""
    try:
        head = msgspec.convert(raw, _Head)
    except msgspec.ValidationError:
        _bad("'ok' is not true or false")
    error = None
    if not head.ok:
        try:
            error = msgspec.convert(head.error, ReplyError)
        except msgspec.ValidationError:
            _bad("a refusal without an error code and message")
    try:
        body = msgspec.convert(raw, _Body)
    except msgspec.ValidationError as exc:  # "... - at `$.pid`": one of _OPTIONAL
        key = str(exc).rpartition("$.")[2].rstrip("`")
        _bad(f"{key!r} is not a {_OPTIONAL[key].__name__}")
    report = _report(body.report) if body.report is not None else None
    return Reply(head.ok, error, body.state, body.out_dir, body.note, body.pid, report)


def checked(reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` itself when its shape is the protocol's (``reply_of``). Raises ProtocolError naming the field."""
    reply_of(reply)
    return reply


def _report(report: Any) -> Report:
    if not isinstance(report, dict):
        _bad("'report' is not an object")
    try:
        raw_parts = msgspec.convert(report, _RawReport).parts
    except msgspec.ValidationError:
        _bad("'report.parts' is not an object")
    parts = {}
    for name, part in raw_parts.items():
        if not isinstance(part, dict):
            _bad(f"report part {name[:40]!r} is not an object")
        try:
            head = msgspec.convert(part, _PartHead)
        except msgspec.ValidationError:
            _bad(f"report part {name[:40]!r} has no string state and reason")
        try:  # absent, null, 0 or empty counts are none
            counts = msgspec.convert(head.counts or {}, dict[str, CountValue])
        except msgspec.ValidationError:
            _bad(f"report part {name[:40]!r} has counts that are not numbers")
        parts[name] = ReportPart(head.state, head.reason, counts)
    return Report(parts)


class _RawReport(Struct):
    parts: dict[str, Any] = {}


class _PartHead(Struct):
    state: str
    reason: str | None
    counts: Any = None


def _bad(what: str) -> NoReturn:
    raise ProtocolError(BAD_REQUEST, f"the agent's reply breaks the protocol: {what}")


__all__ = ["MAX_COUNT_ITEMS", "CountValue", "Hello", "Reply", "ReplyError", "Report", "ReportPart", "checked",
           "hello_of", "reply_of"]

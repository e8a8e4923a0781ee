"""Events strict JSON rejects: repair what can be repaired, find the next event after what cannot.

Two jobs for the trace reader (stream.py), both on one event's bytes or the bytes after it:

- ``parse_event``: parse an event orjson rejects with the standard library's ``json`` (integers of
  any size, NaN/Infinity), after repairs that keep its meaning: invalid UTF-8 becomes U+FFFD,
  control characters are accepted, bare ``inf``/``nan`` become null, and a backslash that starts no
  JSON escape (a Windows path in a ``with_stack`` name: ``C:\\Users\\x\\model.py(12): forward``) is
  escaped, so it stays one backslash in the name. Each repair is named so that it can be counted.
- ``next_event``: after an event no parser reads (a broken key whose unbalanced quote makes every
  later byte look inverted to the structural scanner), the offset of the next event: the first
  ``}, {"`` after it whose object closes and parses as a trace event (an object with a string
  ``ph``). The scanner restarts there; only the events in between are lost.

No JSON is parsed here by hand: candidates are checked with orjson/json, brackets are located by
the structural scanner (scan.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from diagnose.traces.scan import Batch, object_end

_BARE_NONFINITE = re.compile(r"([:\[,]\s*)(-?(?:inf|nan|Inf|NaN|infinity))(?=\s*[,\]}])")
_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})|\\')  # a valid escape, or a lone backslash
_CANDIDATE = re.compile(rb'\}\s*,\s*(\{)\s*"')  # an event's end, a comma, the next event's first key
_PH_KEY = re.compile(rb'"ph"\s*:')
MAX_CANDIDATES = 256  # boundaries tried per search: objects nested in the broken event (bounded work)


class Repair(Enum):
    """How an event strict JSON rejects was read."""

    LENIENT = "lenient"  # invalid UTF-8, control characters, bare inf/nan, integers beyond 64 bits
    BACKSLASHES = "backslashes"  # a backslash that starts no JSON escape was escaped


def _escape_lone_backslashes(text: str) -> str:
    return _ESCAPE.sub(lambda m: m.group(0) if m.group(1) else "\\\\", text)


def parse_event(raw: bytes) -> tuple[Any, Repair | None]:
    """Parse one JSON value strict JSON rejects: (value, the repair that made it readable), or
    (None, None) when even the repairs fail. Never raises."""
    text = _BARE_NONFINITE.sub(r"\1null", raw.decode("utf-8", "replace"))
    try:
        return json.loads(text, strict=False), Repair.LENIENT
    except ValueError:
        pass
    except RecursionError:  # nested deeper than the interpreter allows: no repair helps
        return None, None
    if "\\" not in text:
        return None, None
    try:
        return json.loads(_escape_lone_backslashes(text), strict=False), Repair.BACKSLASHES
    except (ValueError, RecursionError):
        return None, None


def parse_tolerant(raw: bytes) -> Any:
    """``parse_event``'s value alone: the parsed value, or None when even the repairs fail."""
    return parse_event(raw)[0]


@dataclass
class Tally:
    """What tolerant reading met, counted as events stream past. Offsets are bytes of the
    (decompressed) JSON text where the event opens."""

    lenient: int = 0  # read after lenient repairs (Repair.LENIENT)
    backslashes: int = 0  # read after escaping lone backslashes (Repair.BACKSLASHES)
    unparsable: int = 0  # dropped: no parser reads them
    resynced: int = 0  # times the scan restarted at the next event after broken ones
    first_bad_byte: int | None = None  # where the first dropped event opens
    first_backslash_byte: int | None = None  # where the first event with escaped backslashes opens
    out_of_range: int = 0  # events with a time no clock could hold (reader.py ``_in_range``)

    @property
    def repaired(self) -> int:
        return self.lenient + self.backslashes

    def read_with(self, repair: Repair, at: int) -> None:
        if repair is Repair.BACKSLASHES:
            self.backslashes += 1
            if self.first_backslash_byte is None:
                self.first_backslash_byte = at
        else:
            self.lenient += 1

    def dropped(self, at: int, events: int = 1) -> None:
        self.unparsable += events
        if self.first_bad_byte is None:
            self.first_bad_byte = at

    def damage(self) -> Damage:
        return Damage(self.unparsable, self.first_bad_byte, self.resynced, self.backslashes,
                      self.first_backslash_byte)


@dataclass(frozen=True)
class Damage:
    """Malformed events a read met: dropped ones and ones kept after escaping backslashes.
    Offsets are bytes of the (decompressed) JSON text."""

    dropped: int = 0
    first_dropped_byte: int | None = None
    resynced: int = 0  # times the read restarted at the next event after broken ones
    backslashes: int = 0
    first_backslash_byte: int | None = None

    def notes(self) -> list[str]:
        """One sentence per kind of damage (none when there is none)."""
        out = []
        if self.dropped:
            resumed = "; reading resumed at the next event after it" if self.resynced else ""
            out.append(f"{self.dropped} malformed event(s) dropped, the first at byte {self.first_dropped_byte}"
                       f"{resumed}")
        if self.backslashes:
            out.append(f"{self.backslashes} event(s) with unescaped backslashes (e.g. Windows paths in names) "
                       f"repaired by escaping them and kept, the first at byte {self.first_backslash_byte}")
        return out

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def loose_elements(text: bytes) -> int:
    """How many array elements ``text`` (array text between events, no object in it) holds."""
    text = text.strip(b" \t\r\n,")
    if not text:
        return 0
    try:
        items = orjson.loads(b"[" + text + b"]")
    except orjson.JSONDecodeError:
        items = parse_tolerant(b"[" + text + b"]")
    return len(items) if isinstance(items, list) else 1


def parse_batch(batch: Batch, tally: Tally, offset: int, first: int = 0) -> tuple[list[Any], int | None]:
    """The batch's events from event ``first`` on, plus a None for each array element that is
    not an object (so that every path counts them as invalid events, as a whole-document parse
    does), up to the first event no parser reads: (events, that event's index or None).
    ``offset``: where ``batch.buf`` starts in the stream (for the tally's offsets)."""
    loose: list[Any] = [None] * sum(map(loose_elements, batch.edges)) if not first else []
    if not len(batch.starts):
        return loose, None
    if not first:
        try:
            events: list[Any] = orjson.loads(batch.body())  # the batch's events as one array
            return events + loose, None
        except orjson.JSONDecodeError:
            pass
    out = loose
    for i in range(first, len(batch.starts)):
        if i > first:
            gap = batch.buf[int(batch.ends[i - 1]) + 1:int(batch.starts[i])]
            out += [None] * loose_elements(gap)
        raw = batch.event(i)
        try:
            out.append(orjson.loads(raw))
            continue
        except orjson.JSONDecodeError:
            pass
        ev, repair = parse_event(raw)
        if repair is None:
            return out, i
        tally.read_with(repair, offset + int(batch.starts[i]))
        out.append(ev)
    return out, None


def _is_event(raw: bytes) -> bool:
    try:
        ev = orjson.loads(raw)
    except orjson.JSONDecodeError:
        ev = parse_tolerant(raw)
    return isinstance(ev, dict) and isinstance(ev.get("ph"), str)


def next_event(buf: bytes, bad_at: int, within: int) -> int | None:
    """Index in ``buf`` of the opening brace of the first whole, readable event that opens after
    the broken one at ``bad_at`` and at most ``within`` bytes after it; None when ``buf`` holds
    none (more bytes may bring it, or the broken event is the last). At most MAX_CANDIDATES
    boundaries are tried."""
    for n, m in enumerate(_CANDIDATE.finditer(buf, bad_at + 1, bad_at + within + 64)):
        at = m.start(1)
        if at > bad_at + within or n >= MAX_CANDIDATES:
            return None
        end = object_end(buf, at)
        if end is None:
            return None  # the candidate runs past buf: undecided until more bytes come
        if _is_event(buf[at:end + 1]):
            return at
    return None


def events_in(text: bytes) -> int:
    """How many events the bytes of broken events held, counted by their ``"ph"`` keys (at least 1)."""
    return max(1, len(_PH_KEY.findall(text)))


__all__ = ["MAX_CANDIDATES", "Damage", "Repair", "Tally", "events_in", "loose_elements", "next_event", "parse_batch",
           "parse_event", "parse_tolerant"]

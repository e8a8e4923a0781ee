"""Typed decoding of a batch of Kineto events with msgspec: only the fields the columns read.

orjson builds a dict per event and per ``args``, with every key the trace wrote; msgspec decodes
straight into the small structs below and skips every other key, about 2x faster on real traces
and with far fewer objects alive. Values stay untyped (``Any``: ids may be strings, times huge
integers) and are validated in numpy as before (columns.py). A batch whose shape does not fit
(an event that is not an object, ``args`` that is not an object) raises, and the reader falls back
to orjson dicts for it; ``events_of`` types those dicts the same way (what is not an object is left
out, ``args`` that is not an object reads as none), so the columns have one reader.
"""
from __future__ import annotations

import math
from typing import Any

import msgspec

_NAN = math.nan


class Args(msgspec.Struct):
    correlation: Any = -1
    external_id: Any = msgspec.field(default=-1, name="External id")
    stream: Any = -1
    device: Any = -1
    bytes: Any = _NAN
    flops: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    name: Any = None  # thread_name / process_name metadata
    collective: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    seq: Any = msgspec.field(default=None, name="Seq")
    seq_lower: Any = msgspec.field(default=None, name="seq")

    def op_args(self) -> dict[str, Any]:
        """The keys flops.py and op_args.py read, as the dict a trace's ``args`` would be."""
        out = {"Input Dims": self.input_dims, "Input type": self.input_type,
               "Concrete Inputs": self.concrete_inputs, "flops": self.flops}
        return {k: v for k, v in out.items() if v is not None}


class Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = -1
    tid: Any = -1
    ts: Any = None
    dur: Any = None
    id: Any = -1
    args: Args | None = None


class Document(msgspec.Struct, rename="camel"):
    """A whole trace document: its events typed, and the metadata beside them that the reader reads
    (reader.py _Header), as written (UNSET where absent)."""

    trace_events: list[Event]
    distributed_info: Any = msgspec.UNSET
    base_time_nanoseconds: Any = msgspec.UNSET
    device_properties: Any = msgspec.UNSET
    schema_version: Any = msgspec.UNSET

    def header(self) -> dict[str, Any]:
        """The metadata as the document's keys hold it (the ones present)."""
        keys = {"distributedInfo": self.distributed_info, "baseTimeNanoseconds": self.base_time_nanoseconds,
                "deviceProperties": self.device_properties, "schemaVersion": self.schema_version}
        return {k: v for k, v in keys.items() if v is not msgspec.UNSET}


NO_ARGS = Args()
_EVENTS = list[Event]
_DECODER = msgspec.json.Decoder(_EVENTS)
_DOCUMENT = msgspec.json.Decoder(Document)


def events_of(batch: list[Any]) -> list[Event]:
    """The Events of a batch of parsed JSON values (orjson or json dicts), in order; values that
    are not objects are left out (the caller counts them)."""
    try:
        return msgspec.convert(batch, _EVENTS)
    except msgspec.ValidationError:  # one odd event: each on its own
        return [_event(e) for e in batch if e.__class__ is dict]


def _event(e: dict[str, Any]) -> Event:
    try:
        return msgspec.convert(e, Event)
    except msgspec.ValidationError:  # args that are not an object: none, as a trace without args
        return msgspec.convert({k: v for k, v in e.items() if k != "args"}, Event)


def decode_document(body: bytes) -> Document | None:
    """The JSON document ``body`` with typed events; None when it is not one that fits (the caller
    then parses it with orjson)."""
    try:
        return _DOCUMENT.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None


def decode_events(body: bytes) -> list[Event] | None:
    """The events of the JSON array ``body``; None when it is not valid JSON or an event does not
    fit the structs (the caller then parses it with orjson)."""
    try:
        return _DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError):  # ValidationError subclasses DecodeError; an
        return None  # unknown value nested ~1000 deep exhausts the decoder's recursion


__all__ = ["Args", "Document", "Event", "NO_ARGS", "decode_document", "decode_events", "events_of"]

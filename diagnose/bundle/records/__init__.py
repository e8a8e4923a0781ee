"""What one record of each JSON Lines stream is, as a msgspec type: decoded once, checked once.

``Bundle.typed(SPEC)`` decodes every line of a stream straight into the type its spec names
(``StreamSpec.record``: the name of a class here), so readers use attributes instead of re-checking
dict keys. A stream may be hand-edited, torn or written by a hostile target: a line that is not
JSON is a torn line (``Bundle.torn_lines``), a record whose fields have the wrong types or values
out of range is dropped and counted (``Bundle.invalid_records``); unknown fields are ignored, so
older and newer producers stay readable. Where one bad part must not cost the whole record (a
py-spy window with an unusable clock origin), the field is typed loosely and checked by a property.

Units are in the field names (``_ns`` Unix-epoch nanoseconds unless said, ``_s`` seconds, ``_us``
microseconds, ``_bytes``). Host side only: the in-target agent writes plain dicts of these shapes
(diagnose/bundle/streams.py, standard library only, names each type here by its class name).
"""
from __future__ import annotations

from typing import Any

import msgspec

from diagnose.bundle.records.agent import GcPauseRecord, TorchTraceRecord
from diagnose.bundle.records.base import Count, Finite, Record, UnixNs
from diagnose.bundle.records.gpu import DcgmRecord, GpmRecord, NvmlRecord
from diagnose.bundle.records.pyspy import PyspySourceRecord, PyspyWindowRecord, ThreadNameRecord
from diagnose.bundle.records.serving import ServingRecord

# Every record type a StreamSpec names (streams.py ``record``), by class name: one module per source.
# A stream that mixes kinds by a "kind" field names a Union of tagged Records, by its alias.
RECORD_TYPES: dict[str, Any] = {t.__name__: t for t in (
    PyspyWindowRecord, PyspySourceRecord, ThreadNameRecord, GcPauseRecord, TorchTraceRecord)}
RECORD_TYPES["ServingRecord"] = ServingRecord
RECORD_TYPES.update(NvmlRecord=NvmlRecord, GpmRecord=GpmRecord, DcgmRecord=DcgmRecord)


def decoder(type_name: str) -> msgspec.json.Decoder[Any]:
    """The JSON decoder of the record type ``type_name`` (a StreamSpec's ``record``)."""
    return msgspec.json.Decoder(RECORD_TYPES[type_name])


__all__ = ["RECORD_TYPES", "Count", "Finite", "GcPauseRecord", "PyspySourceRecord", "PyspyWindowRecord", "Record",
           "ThreadNameRecord", "TorchTraceRecord", "UnixNs", "decoder"]

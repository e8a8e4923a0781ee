"""The base of every stream record type, and the constrained scalars they share."""
from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

# Unix-epoch ns or a counter: a non-negative int that fits int64 arithmetic with room to spare
# (msgspec never takes a bool for an int).
UnixNs = Annotated[int, Meta(gt=0, lt=2**62)]
Count = Annotated[int, Meta(ge=0, lt=2**62)]
Finite = Annotated[float, Meta(ge=-1e300, le=1e300)]  # rejects inf (JSON has no NaN)


class Record(Struct, kw_only=True, omit_defaults=True):
    """Base of every stream record: keyword fields, unknown ones ignored, defaults omitted on encode."""

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object a stream holds (defaults left out)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out



__all__ = ["Count", "Finite", "Record", "UnixNs"]

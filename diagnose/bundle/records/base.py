"""The base of every stream record type, and the constrained scalars they share."""
from __future__ import annotations

import functools
import types
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta, Struct

S = TypeVar("S", bound=Struct)

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


def lenient(cls: type[S], raw: Any) -> S | None:
    """``cls`` from the JSON object ``raw``, field by field: a field that does not convert keeps its
    default (a nested Struct, ``X | None`` of one or a tuple of them is read the same way in turn, one
    bad entry of a tuple costing that entry); None when ``raw`` is not an object or a required field
    is missing or wrong. For hand-edited or hostile JSON where one bad field must not cost the rest."""
    if not isinstance(raw, dict):
        return None
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name in raw:
            value = _field(hints[f.name], raw[f.encode_name])
            if value is not _WRONG:
                kwargs[f.name] = value
    try:
        return cls(**kwargs)
    except TypeError:  # a required field missing (or wrong)
        return None


_WRONG = object()


@functools.cache
def _hints(cls: type[Struct]) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


def _field(tp: Any, value: Any) -> Any:
    nested = _struct_of(tp)
    if nested is not None:  # a nested struct (or an optional one): read leniently in turn
        got = lenient(nested, value)
        return _WRONG if got is None else got
    if get_origin(tp) is tuple and (item := _struct_of(get_args(tp)[0])) is not None:
        # a list of structs: one bad entry costs that entry
        return tuple(e for v in value if (e := lenient(item, v)) is not None) \
            if isinstance(value, list) else _WRONG
    try:
        return msgspec.convert(value, tp)
    except msgspec.ValidationError:
        return _WRONG


def _struct_of(tp: Any) -> type[Struct] | None:
    """The Struct ``tp`` is, or is optionally (``X | None``); else None."""
    if isinstance(tp, type) and issubclass(tp, Struct):
        return tp
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _struct_of(args[0])
    return None


__all__ = ["Count", "Finite", "Record", "UnixNs", "lenient"]

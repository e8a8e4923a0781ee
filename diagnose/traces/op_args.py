"""The recorded arguments of one torch op, as a Kineto trace holds them with ``record_shapes=True``.

Per positional argument of the op's schema (``aten::conv2d(input, weight, bias, stride, ...)``):
``Input Dims`` (tensor shape, ``[]`` for anything else), ``Input type`` (dtype name, or
``Scalar``/``ScalarList``/empty) and, since torch 2.1, ``Concrete Inputs`` (the printed value of
scalars and int lists, e.g. ``"[2, 2]"``, ``"1"``, ``"False"``; ``""`` for tensors). Older traces
lack ``Concrete Inputs``; every accessor then answers None.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Element sizes of the dtype names torch writes in "Input type".
DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8,
    "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}
# The floating-point precision of an op (its first floating tensor input), as a small code for a
# numpy column. fnuz: the ROCm FP8 spellings.
PRECISIONS = ("unknown", "fp64", "fp32", "fp16", "bf16", "fp8")
_PRECISION_CODE = {"double": 1, "float": 2, "c10::Half": 3, "c10::BFloat16": 4, "c10::Float8_e4m3fn": 5,
                   "c10::Float8_e5m2": 5, "c10::Float8_e4m3fnuz": 5, "c10::Float8_e5m2fnuz": 5}
_TRUE, _FALSE = ("true", "True", "1"), ("false", "False", "0")


def precision_code(args: dict[str, Any]) -> int:
    """Index into PRECISIONS of the op's first floating tensor input (``Input type``); 0 unknown."""
    types = args.get("Input type")
    if isinstance(types, list):
        for t in types:
            code = _PRECISION_CODE.get(t) if isinstance(t, str) else None
            if code:
                return code
    return 0


def numel(shape: list[int] | tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


MAX_DIMS = 64  # torch tensors have at most 64 dimensions; longer "shapes" are malformed args
_MAX_DIM = (1 << 63) - 1


def _is_shape(value: Any) -> bool:
    return (isinstance(value, list) and len(value) <= MAX_DIMS
            and all(type(d) is int and 0 <= d <= _MAX_DIM for d in value))


@dataclass(frozen=True)
class OpArgs:
    """Accessors over one op's ``args``; each returns None where the trace does not say."""

    dims: list[Any]
    types: list[Any]
    concrete: list[Any]

    @classmethod
    def of(cls, args: dict[str, Any]) -> OpArgs:
        lists = [args.get(k) for k in ("Input Dims", "Input type", "Concrete Inputs")]
        return cls(*(v if isinstance(v, list) else [] for v in lists))

    def shape(self, i: int) -> list[int] | None:
        """The tensor shape of argument ``i``; None when it is not a tensor or not recorded."""
        d = self.dims[i] if i < len(self.dims) else None
        return d if _is_shape(d) and self.is_tensor(i) else None

    def is_tensor(self, i: int) -> bool:
        t = self.types[i] if i < len(self.types) else None
        # Scalar/ScalarList/None arguments are typed as such; tensors carry a dtype name
        return isinstance(t, str) and bool(t) and not t.startswith("Scalar") and t != "GenericList"

    def elem_bytes(self, i: int) -> int | None:
        t = self.types[i] if i < len(self.types) else None
        return DTYPE_BYTES.get(t) if isinstance(t, str) else None

    def text(self, i: int) -> str | None:
        c = self.concrete[i] if i < len(self.concrete) else None
        return c.strip().strip("'\"") if isinstance(c, str) and c.strip() else None

    def ints(self, i: int, n: int) -> tuple[int, ...] | None:
        """An int list argument (``"[2, 2]"``) as ``n`` values; a single value is repeated, as
        torch expands ``stride=2`` for an ``int[2]`` parameter."""
        text = self.text(i)
        if text is None:
            return None
        parts = [p.strip() for p in text.strip("[]()").split(",") if p.strip()]
        try:
            values = tuple(int(p) for p in parts)
        except ValueError:
            return None
        if len(values) == 1:
            values *= n
        return values if len(values) == n else None

    def int_value(self, i: int) -> int | None:
        one = self.ints(i, 1)
        return one[0] if one else None

    def flag(self, i: int) -> bool | None:
        text = self.text(i)
        return True if text in _TRUE else False if text in _FALSE else None

    def input_bytes(self) -> float:
        """Bytes of every tensor argument with a known dtype (the traffic an op must read)."""
        total = 0
        for i in range(len(self.dims)):
            shape, size = self.shape(i), self.elem_bytes(i)
            if shape and size:
                total += size * numel(shape)
        return float(total)


# Ops whose first input's leading dimension is the batch the model ran (rows of a linear layer's
# input, images of a convolution). For a flattened [tokens, features] input it counts tokens.
BATCHED_OPS = re.compile(r"^aten::(linear|addmm|mm|matmul|bmm|baddbmm|conv\dd|convolution|_convolution)$")


def batch_dim(name: str, args: dict[str, Any]) -> int:
    """Leading dimension of input 0 of a matmul/linear/conv op with a rank >= 2 input, else -1."""
    if not BATCHED_OPS.match(name):
        return -1
    shape = OpArgs.of(args).shape(0)
    if shape is None or len(shape) < 2 or not isinstance(shape[0], int) or not 1 <= shape[0] < 2**31:
        return -1  # not a batched input, or an empty (0-row) or absurd one: says nothing of the batch
    return int(shape[0])


__all__ = ["BATCHED_OPS", "DTYPE_BYTES", "OpArgs", "PRECISIONS", "batch_dim", "numel", "precision_code"]

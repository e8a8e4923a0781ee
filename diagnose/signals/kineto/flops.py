"""FLOPs and bytes of a CPU op from its trace args.

Kineto writes a ``flops`` arg when the profiler ran with ``with_flops=True`` (older torch); newer
torch keeps FLOPs out of the JSON, so for the matrix-multiply family the same formula torch uses
(2·M·K·N per product, ``torch/csrc/profiler/util.cpp``) is applied to ``Input Dims`` (recorded
with ``record_shapes=True``). Bytes are the tensors the op reads (Input Dims × element size of
``Input type``) plus the product it writes: the minimum traffic, so intensities are upper bounds.
"""
from __future__ import annotations

import math
from typing import Any

# Element sizes of the dtype names torch writes in "Input type".
DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8,
    "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}
# op -> indexes of its two matrix operands in Input Dims
MATMUL_OPERANDS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1),
                   "aten::baddbmm": (1, 2)}
_NAN = math.nan


def _numel(dims: Any) -> int | None:
    if not isinstance(dims, list) or not all(type(d) is int and d >= 0 for d in dims):
        return None
    n = 1
    for d in dims:
        n *= d
    return n


def input_bytes(args: dict[str, Any]) -> float:
    """Bytes of every tensor input with a known dtype; NaN without shapes."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return _NAN
    total = 0
    for d, t in zip(dims, types):
        size, n = DTYPE_BYTES.get(t) if isinstance(t, str) else None, _numel(d)
        if size and n is not None and d:
            total += size * n
    return float(total)


def _matmul(name: str, args: dict[str, Any]) -> tuple[float, float]:
    dims, types = args.get("Input Dims"), args.get("Input type")
    a_i, b_i = MATMUL_OPERANDS[name]
    try:
        a, b = dims[a_i], dims[b_i]  # type: ignore[index]
        elem = DTYPE_BYTES.get(types[a_i], 4)  # type: ignore[index]
    except (TypeError, IndexError, KeyError):
        return _NAN, _NAN
    if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b) or len(a) not in (2, 3):
        return _NAN, _NAN
    if _numel(a) is None or _numel(b) is None:
        return _NAN, _NAN
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    flops = 2.0 * batch * m * k * n
    return flops, input_bytes(args) + float(batch * m * n * elem)


def op_flops_bytes(name: str, args: dict[str, Any]) -> tuple[float, float]:
    """(FLOPs, bytes) of one cpu_op; NaN where the trace does not say."""
    given = args.get("flops")
    if given is not None:
        f = float(given) if type(given) in (int, float) and math.isfinite(given) else _NAN
        return f, input_bytes(args)
    if name in MATMUL_OPERANDS:
        return _matmul(name, args)
    return _NAN, _NAN


__all__ = ["DTYPE_BYTES", "op_flops_bytes"]

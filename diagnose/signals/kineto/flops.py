"""FLOPs and bytes of a CPU op from its trace args.

Kineto wrote a ``flops`` arg when the profiler ran with ``with_flops=True`` in older torch; newer
torch (2.13 included) keeps FLOPs out of the JSON, so the formulas torch itself uses
(flop_formulas.py: matmul family, linear, convolutions, scaled dot-product attention, add/mul) are
applied to the recorded shapes (``Input Dims`` and ``Concrete Inputs``, ``record_shapes=True``).
Bytes are the tensors the op reads (Input Dims × element size of ``Input type``) plus the output
it writes (its element count × the first input's element size): the minimum traffic, so
intensities are upper bounds.
"""
from __future__ import annotations

import math
from typing import Any

from diagnose.signals.kineto.flop_formulas import FLOP_FORMULAS
from diagnose.signals.kineto.op_args import DTYPE_BYTES, OpArgs

FLOP_OPS = frozenset(FLOP_FORMULAS)  # op names with a formula
_NAN = math.nan


def input_bytes(args: dict[str, Any]) -> float:
    """Bytes of every tensor input with a known dtype; NaN without shapes."""
    if not isinstance(args.get("Input Dims"), list) or not isinstance(args.get("Input type"), list):
        return _NAN
    return OpArgs.of(args).input_bytes()


def op_flops_bytes(name: str, args: dict[str, Any]) -> tuple[float, float]:
    """(FLOPs, bytes) of one cpu_op; NaN where the trace does not say."""
    given = args.get("flops")
    if given is not None:
        f = float(given) if type(given) in (int, float) and math.isfinite(given) else _NAN
        return f, input_bytes(args)
    formula = FLOP_FORMULAS.get(name)
    if formula is None:
        return _NAN, _NAN
    op = OpArgs.of(args)
    counted = formula(op)
    if counted is None:
        return _NAN, _NAN
    flops, out_elems = counted
    return flops, op.input_bytes() + float(out_elems * (op.elem_bytes(0) or 4))


__all__ = ["DTYPE_BYTES", "FLOP_OPS", "input_bytes", "op_flops_bytes"]

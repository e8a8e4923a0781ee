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

from diagnose.traces.flop_formulas import FLOP_FORMULAS
from diagnose.traces.op_args import DTYPE_BYTES, OpArgs

FLOP_OPS = frozenset(FLOP_FORMULAS)  # op names with a formula
_NAN = math.nan


def input_bytes(args: dict[str, Any]) -> float:
    """Bytes of every tensor input with a known dtype; NaN without shapes."""
    if not isinstance(args.get("Input Dims"), list) or not isinstance(args.get("Input type"), list):
        return _NAN
    return OpArgs.of(args).input_bytes()


# Past these one op cannot be real: 1e18 FLOPs is ~17 minutes of an H200's dense BF16 peak, and
# 2**50 bytes (1 PiB) is thousands of GPUs' memory. Shapes that imply more are malformed args.
MAX_OP_FLOPS = 1e18
MAX_OP_BYTES = float(2 ** 50)


def op_flops_bytes(name: str, args: dict[str, Any]) -> tuple[float, float]:
    """(FLOPs, bytes) of one cpu_op; NaN where the trace does not say or its args are impossible
    (non-finite, negative, or past MAX_OP_FLOPS / MAX_OP_BYTES)."""
    try:
        flops, nbytes = _flops_bytes(name, args)
    except (OverflowError, ValueError, TypeError, ZeroDivisionError):
        return _NAN, _NAN
    flops = flops if math.isfinite(flops) and 0 <= flops <= MAX_OP_FLOPS else _NAN
    nbytes = nbytes if math.isfinite(nbytes) and 0 <= nbytes <= MAX_OP_BYTES else _NAN
    return flops, nbytes


def _flops_bytes(name: str, args: dict[str, Any]) -> tuple[float, float]:
    given = args.get("flops")
    if given is not None:
        f = float(given) if type(given) in (int, float) else _NAN
        return f, input_bytes(args)
    formula = FLOP_FORMULAS.get(name)
    if formula is None:
        return _NAN, _NAN
    op = OpArgs.of(args)
    counted = formula(op)
    if counted is None:
        return _NAN, _NAN
    flops, out_elems = counted
    if flops < 0 or out_elems < 0:  # negative groups/padding: not a shape torch could run
        return _NAN, _NAN
    return float(flops), op.input_bytes() + float(out_elems * (op.elem_bytes(0) or 4))


__all__ = ["DTYPE_BYTES", "FLOP_OPS", "input_bytes", "op_flops_bytes"]

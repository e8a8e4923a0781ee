"""FLOP formulas per torch op, from the shapes and scalars a trace records: the same formulas torch
itself uses, in a registry keyed by op name.

Sources (torch 2.13): ``torch/csrc/profiler/util.cpp`` ``computeFlops`` (what ``with_flops=True``
reports in ``prof.key_averages()``: aten::conv2d, mm, addmm, bmm, baddbmm, mul, add) and
``torch/utils/flop_counter.py`` (``FlopCounterMode``: mm_flop, bmm_flop, conv_flop_count,
sdpa_flop_count). A multiply-add counts as 2 FLOPs; bias additions are not counted (as in both).

Each formula returns (FLOPs, elements of the output) or None when the recorded shapes do not fit
the op (missing ``Concrete Inputs``, mismatched inner dimensions, a stride of 0...). Wrapper ops
(``aten::linear`` over ``aten::addmm``, ``aten::conv2d`` over ``aten::convolution``) are listed
too: the roofline counts only the innermost op with a formula on each call path (roofline.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from diagnose.traces.op_args import OpArgs, numel

Counted = tuple[float, int]  # (FLOPs, output elements)
Formula = Callable[[OpArgs], "Counted | None"]


def _broadcast(*shapes: list[int]) -> list[int] | None:
    """numpy/torch broadcasting of shapes; None when they do not broadcast."""
    out: list[int] = []
    for dims in zip(*(([1] * (max(map(len, shapes)) - len(s)) + list(s)) for s in shapes)):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def gemm(a_i: int, b_i: int, op: OpArgs) -> Counted | None:
    """aten::mm/addmm ([M,K]·[K,N]) and aten::bmm/baddbmm ([B,M,K]·[B,K,N]): 2·B·M·K·N.

    util.cpp computeFlops (kMMOp/kAddMMOp: 2·numel(mat1)/K·numel(mat2); kBMMOp/kBAddBMMOp);
    flop_counter.py mm_flop/bmm_flop. ``a_i``/``b_i``: positions of the two matrices (addmm's
    first argument is the added ``self``).
    """
    a, b = op.shape(a_i), op.shape(b_i)
    if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3) or a[-1] != b[-2]:
        return None
    batch = a[0] if len(a) == 3 else 1
    if len(a) == 3 and b[0] != batch:
        return None
    m, k, n = a[-2], a[-1], b[-1]
    return 2.0 * batch * m * k * n, batch * m * n


def matmul(op: OpArgs) -> Counted | None:
    """aten::matmul with torch.matmul's semantics: a 1-D operand gains a unit row/column, leading
    dims broadcast; 2·batch·M·K·N, what FlopCounterMode counts for the mm/bmm matmul dispatches to
    (flop_counter.py mm_flop/bmm_flop)."""
    a, b = op.shape(0), op.shape(1)
    if not a or not b:
        return None
    a2, b2 = (a if len(a) > 1 else [1] + a), (b if len(b) > 1 else b + [1])
    batch = _broadcast(a2[:-2], b2[:-2])
    if batch is None or a2[-1] != b2[-2]:
        return None
    m, k, n = a2[-2], a2[-1], b2[-1]
    return 2.0 * numel(batch) * m * k * n, numel(batch) * m * n


def linear(op: OpArgs) -> Counted | None:
    """aten::linear(input [..., in], weight [out, in]): 2·batch·in·out, batch = numel(input[:-1]);
    FlopCounterMode counts the addmm/mm linear dispatches to (flop_counter.py addmm_flop)."""
    x, w = op.shape(0), op.shape(1)
    if not x or w is None or len(w) != 2 or w[1] != x[-1]:
        return None
    batch = numel(x[:-1])
    return 2.0 * batch * x[-1] * w[0], batch * w[0]


@dataclass(frozen=True)
class ConvLayout:
    """Positions of a convolution op's arguments in its schema (input 0, weight 1 in all)."""

    stride: int
    padding: int
    dilation: int
    groups: int
    transposed: int | None = None  # position of the ``transposed`` flag
    output_padding: int | None = None
    always_transposed: bool = False  # the *_convolution_transpose ops


# aten::conv2d(input, weight, bias, stride, padding, dilation, groups)
CONV_ND = ConvLayout(stride=3, padding=4, dilation=5, groups=6)
# aten::convolution / _convolution(input, weight, bias, stride, padding, dilation, transposed,
# output_padding, groups, ...)
CONVOLUTION = ConvLayout(stride=3, padding=4, dilation=5, groups=8, transposed=6, output_padding=7)
# aten::cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): no bias
CUDNN = ConvLayout(stride=3, padding=2, dilation=4, groups=5)
# aten::mkldnn_convolution / miopen_convolution(self, weight, bias, padding, stride, dilation, groups)
MKLDNN = ConvLayout(stride=4, padding=3, dilation=5, groups=6)
# aten::cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation, groups, ...)
CUDNN_T = ConvLayout(stride=4, padding=2, dilation=5, groups=6, output_padding=3, always_transposed=True)
# aten::miopen_convolution_transpose(self, weight, bias, padding, output_padding, stride, dilation, groups, ...)
MIOPEN_T = ConvLayout(stride=5, padding=3, dilation=6, groups=7, output_padding=4, always_transposed=True)


def _conv_out(x: list[int], w: list[int], op: OpArgs, lay: ConvLayout, transposed: bool) -> list[int] | None:
    """Output spatial size, as torch derives it (util.cpp computeFlops for conv2d:
    (in + 2·pad - dil·(k-1) - 1) / stride + 1; transposed: (in-1)·stride - 2·pad + dil·(k-1) +
    output_padding + 1). The ``conv2d.padding`` overload records ``padding="same"`` as an empty
    string: None here, and the ``aten::convolution`` it calls (integer padding) is counted."""
    n = len(x) - 2
    stride, pad, dil = op.ints(lay.stride, n), op.ints(lay.padding, n), op.ints(lay.dilation, n)
    if stride is None or pad is None or dil is None or 0 in stride:
        return None
    if transposed:
        extra = op.ints(lay.output_padding, n) if lay.output_padding is not None else (0,) * n
        if extra is None:
            return None
        return [(i - 1) * s - 2 * p + d * (k - 1) + e + 1
                for i, k, s, p, d, e in zip(x[2:], w[2:], stride, pad, dil, extra)]
    return [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d in zip(x[2:], w[2:], stride, pad, dil)]


def conv(lay: ConvLayout, op: OpArgs) -> Counted | None:
    """Convolutions: 2·N·prod(out spatial)·Cout·(Cin/groups)·prod(kernel) = util.cpp's
    2·N·Hout·Wout·Kh·Kw·Cin·Cout/groups; transposed: 2·N·prod(in spatial)·prod(weight)
    (flop_counter.py conv_flop_count)."""
    x, w = op.shape(0), op.shape(1)
    groups = op.int_value(lay.groups)
    if x is None or w is None or len(x) < 3 or len(w) != len(x) or not groups:
        return None
    transposed = lay.always_transposed or (op.flag(lay.transposed) if lay.transposed is not None else False)
    if transposed is None:
        return None
    out = _conv_out(x, w, op, lay, transposed)
    if out is None or min(out) <= 0:
        return None
    cout = w[1] * groups if transposed else w[0]
    spatial = x[2:] if transposed else out
    return 2.0 * x[0] * numel(spatial) * numel(w), x[0] * cout * numel(out)


def sdpa(op: OpArgs) -> Counted | None:
    """Scaled dot-product attention forward, q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv]:
    2·batch·Lq·Lk·D (Q·Kᵀ) + 2·batch·Lq·Lk·Dv (P·V) = 4·B·H·Lq·Lk·D when Dv = D, batch = B·H
    of the query (grouped-query K/V heads broadcast). flop_counter.py sdpa_flop_count; causal
    masking is not discounted, as there."""
    q, k, v = op.shape(0), op.shape(1), op.shape(2)
    if q is None or k is None or v is None or min(len(q), len(k), len(v)) < 2:
        return None
    if k[-1] != q[-1] or v[-2] != k[-2]:
        return None
    batch, lq, lk = numel(q[:-2]), q[-2], k[-2]
    return 2.0 * batch * lq * lk * (q[-1] + v[-1]), batch * lq * v[-1]


def elementwise(op: OpArgs) -> Counted | None:
    """aten::add / aten::mul: one FLOP per output element. util.cpp computeFlops (kAddOp/kMulOp)
    counts numel of the first input; the broadcast output is used here, which is the same when
    the first input has the output's shape and right when it is the smaller one."""
    shapes = [s for s in (op.shape(0), op.shape(1)) if s is not None]
    out = _broadcast(*shapes) if shapes else None
    return (float(numel(out)), numel(out)) if out is not None else None


FLOP_FORMULAS: dict[str, Formula] = {
    "aten::mm": partial(gemm, 0, 1),
    "aten::addmm": partial(gemm, 1, 2),
    "aten::bmm": partial(gemm, 0, 1),
    "aten::baddbmm": partial(gemm, 1, 2),
    "aten::matmul": matmul,
    "aten::linear": linear,
    "aten::conv1d": partial(conv, CONV_ND),
    "aten::conv2d": partial(conv, CONV_ND),
    "aten::conv3d": partial(conv, CONV_ND),
    "aten::convolution": partial(conv, CONVOLUTION),
    "aten::_convolution": partial(conv, CONVOLUTION),
    "aten::cudnn_convolution": partial(conv, CUDNN),
    "aten::mkldnn_convolution": partial(conv, MKLDNN),
    "aten::miopen_convolution": partial(conv, MKLDNN),
    "aten::cudnn_convolution_transpose": partial(conv, CUDNN_T),
    "aten::miopen_convolution_transpose": partial(conv, MIOPEN_T),
    "aten::scaled_dot_product_attention": sdpa,
    "aten::_scaled_dot_product_flash_attention": sdpa,
    "aten::_scaled_dot_product_efficient_attention": sdpa,
    "aten::_scaled_dot_product_cudnn_attention": sdpa,
    "aten::_scaled_dot_product_flash_attention_for_cpu": sdpa,
    "aten::add": elementwise,
    "aten::mul": elementwise,
}


__all__ = ["CONVOLUTION", "CONV_ND", "CUDNN", "CUDNN_T", "Counted", "FLOP_FORMULAS", "Formula", "MIOPEN_T", "MKLDNN",
           "ConvLayout", "conv", "elementwise", "gemm", "linear", "matmul", "sdpa"]

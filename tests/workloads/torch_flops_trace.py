"""Record a real torch profiler (Kineto) trace of ops with FLOP formulas, plus torch's own counts.

    python torch_flops_trace.py OUT_DIR [--cuda]

Writes OUT_DIR/trace.json (record_shapes, with_flops; CPU activities, plus CUDA with ``--cuda``,
where the ops run on the GPU: cuDNN convolutions, fused attention kernels) and
OUT_DIR/torch_flops.json: ``key_averages`` (FLOPs per op name that torch's profiler computes,
torch/csrc/profiler/util.cpp computeFlops), ``flop_counter`` (FlopCounterMode per aten overload
packet on the same calls) and ``sdpa_math`` (FlopCounterMode on the attention calls forced to the
math backend: on CPU the fused kernel, aten::_scaled_dot_product_flash_attention_for_cpu, has no
FlopCounterMode formula).
"""
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

CUDA = "--cuda" in sys.argv
DEV = "cuda" if CUDA else "cpu"
torch.manual_seed(0)
torch.set_num_threads(1)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEV, dtype=dtype)


X = rand(2, 4, 17, 15)
A = rand(4, 24, 24)
if CUDA:  # bf16 takes a fused kernel (cuDNN attention with torch 2.11 on an H200), fp32 the efficient one
    ATTN = [(rand(2, 8, 128, 64, dtype=torch.bfloat16),) * 3,
            (rand(2, 4, 96, 32), rand(2, 4, 80, 32), rand(2, 4, 80, 32))]
else:  # grouped-query: 8 query heads share 2 key/value heads
    ATTN = [(rand(2, 8, 16, 32), rand(2, 2, 24, 32), rand(2, 2, 24, 32))]


def attention():
    for q, k, v in ATTN:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def model():
    F.conv2d(X, rand(6, 2, 3, 5), stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)
    F.conv2d(X, rand(6, 4, 3, 3), padding="same")  # recorded as "", counted at aten::convolution
    F.conv1d(rand(2, 4, 33), rand(8, 4, 5), stride=3)
    F.conv_transpose2d(X, rand(4, 3, 3, 3), stride=2, padding=1, output_padding=1)
    F.linear(rand(3, 5, 16), rand(10, 16), rand(10))
    F.linear(rand(2, 512), rand(64, 512), rand(64))
    torch.matmul(rand(3, 1, 5, 7), rand(4, 7, 2))
    torch.matmul(A, A)
    attention()
    return A + A, A * A


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    with torch.no_grad():
        model()  # warm-up: cuDNN/cuBLAS handles and algorithm choice stay out of the trace
        with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
            model()
            if CUDA:
                torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / "trace.json"))
    averages: dict[str, int] = {}
    for e in prof.key_averages():
        if e.flops:
            averages[e.key] = averages.get(e.key, 0) + int(e.flops)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as math_counter:
        attention()
    counts = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if CUDA else "cpu",
              "key_averages": averages,
              "flop_counter": {str(k): int(v) for k, v in counter.get_flop_counts()["Global"].items()},
              "flop_counter_total": int(counter.get_total_flops()),
              "sdpa_math": int(math_counter.get_total_flops())}
    (out / "torch_flops.json").write_text(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Compute-bound workload: large float32 matrix multiplies on the CPU."""
import torch

torch.set_num_threads(2)
A = torch.randn(1024, 1024)
B = torch.randn(1024, 1024)


def matmul_loop():
    while True:
        torch.mm(A, B)


print("READY", flush=True)
matmul_loop()

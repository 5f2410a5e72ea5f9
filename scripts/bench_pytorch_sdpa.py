#!/usr/bin/env python3
"""PyTorch SDPA (FlashAttention backend) causal attention timings, the peer of bench_kernels' rows.

Times F.scaled_dot_product_attention forward and forward+backward on (B, NH, T, hd) bf16 tensors
with CUDA events and prints rows in bench_kernels' format: the forward counts 4·B·NH·T²·hd/2
FLOPs (causal), the backward 2.5 times that (backward alone: forward+backward minus forward).
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_pytorch_sdpa: no CUDA device", file=sys.stderr)
        return 77
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    flops = 4.0 * args.batch * args.heads * args.seq * args.seq * args.head_dim / 2

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        q.grad = k.grad = v.grad = None
        forward().backward(dout)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        with torch.no_grad():
            forward_ms = time_ms(forward, args.iters)
        backward_ms = time_ms(forward_backward, args.iters) - forward_ms
    label = f"(B={args.batch} NH={args.heads} T={args.seq} hd={args.head_dim} bf16) [PyTorch SDPA flash]"
    for name, ms, f in (("attention_forward", forward_ms, flops), ("attention_backward", backward_ms, 2.5 * flops)):
        print(f"{name + ' ' + label:<58} {ms * 1e3:10.1f} us {f / ms / 1e9:8.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

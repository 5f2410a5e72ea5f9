#!/usr/bin/env python3
"""PyTorch GPT-2 training-step benchmark, the peer strata is measured against on a GPU.

A plain GPT-2 (pre-LN, tanh GELU, tied LM head, no dropout) trained on random tokens with
torch.compile, SDPA flash attention, fused AdamW, bf16 autocast and gradient clipping (as strata's GPT-2
configs). Prints one JSON line:
tokens/s, MFU against 989 TFLOP/s (FLOPs/token = 6N + 6·L·C·T, strata's formula), step time
and peak memory.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PEAK_BF16_FLOPS = 989e12


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d_model, eps=1e-5)
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.attn_proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model, eps=1e-5)
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.mlp_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda y: y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)  # (B, NH, T, hd)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer: int, n_head: int, d_model: int, vocab: int, seq: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def write_kernel_profile(step, path: str, steps: int) -> None:
    """Each GPU kernel's name, launches and microseconds per step, longest first (tab-separated)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if device_us > 0:
            rows.append((device_us / steps, event.count / steps, event.key))
    with open(path, "w") as f:
        f.write(f"us_per_step\tlaunches_per_step\tkernel\n")
        for us, count, name in sorted(rows, reverse=True):
            f.write(f"{us:.1f}\t{count:g}\t{name}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--n-head", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50304, help="padded vocabulary size")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16, help="micro-batch (sequences)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps (compilation happens here)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--clip", type=float, default=1.0, help="gradient clipping norm (0: off)")
    parser.add_argument("--profile", metavar="FILE",
                        help="after timing, profile 2 steps and write each GPU kernel's time per step to FILE")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print(json.dumps({"impl": "pytorch", "error": "no CUDA device"}))
        return 77
    device = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(args.n_layer, args.n_head, args.d_model, args.vocab, args.seq).to(device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = model if args.no_compile else torch.compile(model)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.grad_accum):
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    loss = step_model(tokens, targets)
            (loss / args.grad_accum).backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    step_s = (time.perf_counter() - start) / args.steps
    tokens_per_step = args.batch * args.seq * args.grad_accum
    flops_per_token = 6 * params + 6 * args.n_layer * args.d_model * args.seq
    tokens_per_s = tokens_per_step / step_s
    result = {
        "impl": "pytorch",
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "compile": not args.no_compile,
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "d_model": args.d_model,
        "vocab": args.vocab,
        "batch": args.batch,
        "grad_accum": args.grad_accum,
        "seq": args.seq,
        "params": params,
        "step_ms": round(step_s * 1e3, 3),
        "tokens_per_s": round(tokens_per_s, 1),
        "mfu": round(tokens_per_s * flops_per_token / PEAK_BF16_FLOPS, 4),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3),
        "final_loss": round(float(loss), 4),
    }
    if args.profile:
        write_kernel_profile(step, args.profile, steps=2)
    if not math.isfinite(result["final_loss"]):
        result["error"] = "non-finite loss"
    print(json.dumps(result))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())

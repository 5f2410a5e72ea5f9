#!/usr/bin/env python3
"""Independent PyTorch GPT-2 that checks strata's single-rank fp32 CPU training.

Loads the HuggingFace export of strata's seed checkpoint (step 0), reads the same token
shards in the same global order, and compares with strata's run: the loss of the first
step, every parameter's gradient (strata's --dump-grads), and the loss of every step of a
short AdamW run with the same schedule, weight decay and clipping. Computes in float64, so
it measures strata's error, not both programs' rounding.
"""
import argparse
import glob
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
        data = f.read()
    dtypes = {"F32": np.float32, "F64": np.float64, "I32": np.int32}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array.astype(np.float64))
    return tensors


def read_tokens(pattern):
    pieces = []
    for path in sorted(glob.glob(pattern)):
        header = np.fromfile(path, dtype=np.int32, count=256)
        width = {20240520: np.uint16, 20240801: np.uint32}[int(header[0])]
        pieces.append(np.fromfile(path, dtype=width, offset=1024, count=int(header[2])).astype(np.int64))
    return np.concatenate(pieces)


class Gpt2(torch.nn.Module):
    """GPT-2 written from the architecture description: pre-LN blocks, tanh GELU, tied head."""

    def __init__(self, weights, n_layer, n_head):
        super().__init__()
        self.n_layer, self.n_head = n_layer, n_head
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v.clone()) for k, v in weights.items()})

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.w("wte.weight")[idx] + self.w("wpe.weight")[:t]
        c = x.shape[-1]
        hd = c // self.n_head
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        for i in range(self.n_layer):
            h = F.layer_norm(x, (c,), self.w(f"h.{i}.ln_1.weight"), self.w(f"h.{i}.ln_1.bias"), 1e-5)
            qkv = h @ self.w(f"h.{i}.attn.c_attn.weight") + self.w(f"h.{i}.attn.c_attn.bias")
            q, k, v = qkv.split(c, dim=-1)
            q, k, v = (z.view(b, t, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + y @ self.w(f"h.{i}.attn.c_proj.weight") + self.w(f"h.{i}.attn.c_proj.bias")
            h = F.layer_norm(x, (c,), self.w(f"h.{i}.ln_2.weight"), self.w(f"h.{i}.ln_2.bias"), 1e-5)
            h = F.gelu(h @ self.w(f"h.{i}.mlp.c_fc.weight") + self.w(f"h.{i}.mlp.c_fc.bias"), approximate="tanh")
            x = x + h @ self.w(f"h.{i}.mlp.c_proj.weight") + self.w(f"h.{i}.mlp.c_proj.bias")
        x = F.layer_norm(x, (c,), self.w("ln_f.weight"), self.w("ln_f.bias"), 1e-5)
        logits = x @ self.w("wte.weight").t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def deepspeed_lr(it, cfg):
    """WarmupCosineLR of DeepSpeed with linear warmup, for iteration `it` (starts at -1)."""
    if it < 0:
        return 0.0
    w, total, lr = max(2, cfg["warmup"]), cfg["total"], cfg["lr"]
    if it < w:
        return lr * (cfg["warmup_min_ratio"] + (it / w) * (1 - cfg["warmup_min_ratio"]))
    s, span = it - w + 1, total - w
    return lr * max(0.0, cfg["cos_min_ratio"] + (1 - cfg["cos_min_ratio"]) * (1 + math.cos(math.pi * s / span)) / 2)


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_with_transformers(export_dir, first_batch, micro, expected_loss):
    """Where HuggingFace transformers is installed, the export must load in GPT2LMHeadModel
    and give the same step-0 loss."""
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        print("transformers not installed: GPT2LMHeadModel loading not checked")
        return []
    hf = GPT2LMHeadModel.from_pretrained(export_dir, torch_dtype=torch.float64).eval()
    x, y = first_batch
    with torch.no_grad():
        losses = [F.cross_entropy(hf(x[i:i + micro]).logits.flatten(0, 1), y[i:i + micro].flatten())
                  for i in range(0, x.shape[0], micro)]
    loss = float(sum(losses) / len(losses))
    r = abs(loss - expected_loss) / expected_loss
    print(f"transformers GPT2LMHeadModel step-0 loss {loss:.9f} rel {r:.2e}")
    return [f"transformers' GPT2LMHeadModel loss differs by {r:.2e}"] if r > 1e-6 else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True)
    ap.add_argument("--grads", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--settings", required=True, help="JSON with the run's hyper-parameters")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    s = json.load(open(a.settings))
    hf_config = json.load(open(f"{a.export}/config.json"))
    weights = read_safetensors(f"{a.export}/model.safetensors")
    model = Gpt2(weights, hf_config["n_layer"], hf_config["n_head"])
    tokens = torch.from_numpy(read_tokens(a.data))
    T, gbs, micro = s["seq_len"], s["global_batch"], s["micro_batch"]

    def batch(step):  # sequence g covers tokens [g*T, g*T + T + 1)
        rows = [tokens[g * T: g * T + T + 1] for g in range(step * gbs, (step + 1) * gbs)]
        seq = torch.stack(rows)
        return seq[:, :-1], seq[:, 1:]

    records = [json.loads(line) for line in open(a.metrics)]
    strata_losses = [r["loss"] for r in records if r["type"] == "train"]
    failures = []

    # Step 0: loss and every gradient. strata accumulates micro-batches; the mean over the
    # global batch is the same objective.
    x, y = batch(0)
    losses = [model(x[i:i + micro], y[i:i + micro]) for i in range(0, gbs, micro)]
    loss0 = sum(losses) / len(losses)
    loss0.backward()
    r = abs(strata_losses[0] - loss0.item()) / abs(loss0.item())
    print(f"step-0 loss: strata {strata_losses[0]:.9f} torch {loss0.item():.9f} rel {r:.2e}")
    if r > 1e-5:
        failures.append(f"step-0 loss differs by {r:.2e} (limit 1e-5)")
    strata_grads = read_safetensors(a.grads)
    worst = 0.0
    for name in weights:
        g = model.w(name).grad
        e = rel(strata_grads[name], g)
        worst = max(worst, e)
        if e > 1e-4:
            failures.append(f"gradient of {name} differs by {e:.2e} (limit 1e-4)")
    print(f"gradients: {len(weights)} tensors, worst relative difference {worst:.2e}")
    grad_norm0 = math.sqrt(sum(float(model.w(n).grad.pow(2).sum()) for n in weights))
    if grad_norm0 <= s["clip"]:
        failures.append(f"clipping is not exercised: step-0 grad norm {grad_norm0:.3f} <= {s['clip']}")

    # The AdamW run. Same groups as strata: decay on 2-D weights, none on biases and LN.
    decay = [model.w(n) for n in weights if weights[n].dim() == 2]
    no_decay = [model.w(n) for n in weights if weights[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=0.0, betas=tuple(s["betas"]), eps=s["eps"])
    worst_curve = 0.0
    for step in range(len(strata_losses)):
        opt.zero_grad()
        x, y = batch(step)
        losses = [model(x[i:i + micro], y[i:i + micro]) for i in range(0, gbs, micro)]
        loss = sum(losses) / len(losses)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), s["clip"])
        for group in opt.param_groups:
            group["lr"] = deepspeed_lr(step - 1, s)  # optimizer step k runs with it = k - 2
        opt.step()
        e = abs(strata_losses[step] - loss.item()) / abs(loss.item())
        worst_curve = max(worst_curve, e)
        print(f"step {step + 1:2d}: strata {strata_losses[step]:.7f} torch {loss.item():.7f} rel {e:.2e}")
        if e > 1e-4:
            failures.append(f"loss of step {step + 1} differs by {e:.2e} (limit 1e-4)")
    if strata_losses[-1] >= strata_losses[0]:
        failures.append("the loss did not fall over the run")
    print(f"loss curve: {len(strata_losses)} steps, worst relative difference {worst_curve:.2e}")
    failures += check_with_transformers(a.export, batch(0), micro, loss0.item())
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

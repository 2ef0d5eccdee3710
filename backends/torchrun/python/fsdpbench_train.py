#!/usr/bin/env python3
"""fsdpbench's PyTorch reference trainer: the Go trainer's model, initialization,
synthetic data and AdamW step, written in PyTorch so the two engines can be compared
loss for loss (backends/torchrun/parity_test.go).

Everything here mirrors backends/gotrain:
  - model/layout.go: the Llama-style decoder, tensors named as Hugging Face's
    LlamaForCausalLM, in the order FSDP flattens them;
  - model/random.go: SplitMix64 + FNV-1a + Box-Muller initialization per (seed,
    tensor name), and the synthetic batch indexed by global sample;
  - device/cpu/ops.go: RMSNorm, RoPE (rotate_half), causal GQA attention, SwiGLU,
    mean cross-entropy, and the AdamW step operation for operation;
  - fsdp/fsdp.go: step s uses global samples [s*G, (s+1)*G); AdamW over every
    tensor (weight decay included on norms and embeddings, as one param group).

This file runs single-process; the DDP/FSDP launch under torchrun reuses
build_params, batch, forward and AdamW.
"""

import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
INIT_STD = 0.02
DEFAULT_NORM_EPS = 1e-5
DEFAULT_ROPE_THETA = 10000.0


# ---- portable random numbers (model/random.go) ----

def fnv1a64(s):
    """64-bit FNV-1a of the UTF-8 bytes of s."""
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & MASK64
    return h


def splitmix64(state, j):
    """Output j (0-based) of SplitMix64 seeded with state; state and j are uint64
    numpy arrays or scalars, wrapping mod 2^64 as Go's uint64 does."""
    with np.errstate(over="ignore"):
        z = np.uint64(state) + (np.uint64(j) + np.uint64(1)) * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def normal(key, n):
    """Standard normal values 0..n-1 of the stream keyed by key (float64)."""
    j = np.arange(n, dtype=np.uint64)
    u1 = ((splitmix64(key, 2 * j) >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (splitmix64(key, 2 * j + np.uint64(1)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


# ---- shape and layout (model/layout.go) ----

def load_shape(arg):
    """Reads a shapes.Shape JSON dump, inline ("{...}") or from a file, and refuses
    what the Go trainer does not implement, so the two never train different models."""
    if arg.lstrip().startswith("{"):
        s = json.loads(arg)
    else:
        with open(arg, encoding="utf-8") as f:
            s = json.load(f)
    name = s.get("name") or "(unnamed)"
    if s.get("arch") != "llama":
        raise ValueError(f"model {name}: architecture {s.get('arch')!r} is not implemented; use a llama shape")
    if s.get("qkv_bias") or s.get("out_bias") or s.get("mlp_bias") or s.get("tied_embeddings"):
        raise ValueError(f"model {name}: biases and tied embeddings are not implemented; use a bias-free untied llama shape")
    for k in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
        if int(s.get(k, 0)) <= 0:
            raise ValueError(f"model {name}: {k} must be positive, got {s.get(k)}")
    if s["hidden"] % s["heads"] or s["heads"] % s["kv_heads"] or (s["hidden"] // s["heads"]) % 2:
        raise ValueError(f"model {name}: hidden must divide by heads, heads by kv_heads, and the head dim must be even")
    s["norm_eps"] = s.get("norm_eps") or DEFAULT_NORM_EPS
    s["rope_theta"] = s.get("rope_theta") or DEFAULT_ROPE_THETA
    return s


def layout(s):
    """The model's units in order, each a list of (name, shape, std); std None means
    initialized to ones (RMSNorm weights)."""
    h, hd, inter, vocab = s["hidden"], s["hidden"] // s["heads"], s["intermediate"], s["vocab"]
    qd, kvd = s["heads"] * hd, s["kv_heads"] * hd
    resid = INIT_STD / math.sqrt(2 * s["layers"])
    units = [[("model.embed_tokens.weight", (vocab, h), INIT_STD)]]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        units.append([
            (p + "self_attn.q_proj.weight", (qd, h), INIT_STD),
            (p + "self_attn.k_proj.weight", (kvd, h), INIT_STD),
            (p + "self_attn.v_proj.weight", (kvd, h), INIT_STD),
            (p + "self_attn.o_proj.weight", (h, qd), resid),
            (p + "mlp.gate_proj.weight", (inter, h), INIT_STD),
            (p + "mlp.up_proj.weight", (inter, h), INIT_STD),
            (p + "mlp.down_proj.weight", (h, inter), resid),
            (p + "input_layernorm.weight", (h,), None),
            (p + "post_attention_layernorm.weight", (h,), None),
        ])
    units.append([("model.norm.weight", (h,), None), ("lm_head.weight", (vocab, h), INIT_STD)])
    return units


def build_params(s, seed):
    """Every tensor's initial value by name, float32: float32(std*normal(seed ^
    fnv1a64(name), j)) rounded once, or ones."""
    params = {}
    for unit in layout(s):
        for name, shape, std in unit:
            n = int(np.prod(shape))
            if std is None:
                vals = np.ones(n, dtype=np.float32)
            else:
                key = np.uint64((seed ^ fnv1a64(name)) & MASK64)
                vals = (std * normal(key, n)).astype(np.float32)
            params[name] = torch.from_numpy(vals.reshape(shape)).requires_grad_(True)
    return params


# ---- synthetic data (model.Batch) ----

def batch(seed, first_sample, n, seq_len, vocab):
    """Inputs and targets [n, seq_len] int64 of global samples [first_sample,
    first_sample+n): sample i is seq_len+1 tokens splitmix64(state_i, j) mod vocab,
    state_i = splitmix64(seed ^ fnv1a64("data"), i)."""
    key = np.uint64((seed ^ fnv1a64("data")) & MASK64)
    states = splitmix64(key, np.arange(first_sample, first_sample + n, dtype=np.uint64))
    j = np.arange(seq_len + 1, dtype=np.uint64)
    toks = (splitmix64(states[:, None], j[None, :]) % np.uint64(vocab)).astype(np.int64)
    toks = torch.from_numpy(toks)
    return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


# ---- the model (device/cpu/ops.go, model/pass.go) ----

def rmsnorm(x, w, eps):
    """y = w * (x * (mean(x^2) + eps)^-1/2), Hugging Face LlamaRMSNorm's order."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope_table(seq, hd, theta):
    """cos and sin [seq, hd] of t*theta^(-2i/hd), computed in float64 and rounded
    once, each half repeated (rotate_half convention)."""
    half = hd // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / hd)
    ang = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


def apply_rope(x, cos, sin):
    """x [b, t, heads, hd] rotated pair (x_i, x_{i+hd/2}) by its position's angle."""
    return x * cos[None, :, None, :] + rotate_half(x) * sin[None, :, None, :]


def attention(q, k, v, heads, kv_heads):
    """Causal grouped-query attention: query head h reads kv head h // (heads/kv_heads).
    q [b, t, heads, hd], k and v [b, t, kv_heads, hd]; returns [b, t, heads*hd]."""
    b, t, _, hd = q.shape
    rep = heads // kv_heads
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(b, t, heads * hd)


def forward(s, params, inputs, targets):
    """Mean cross-entropy over the batch's tokens."""
    b, t = inputs.shape
    heads, kv_heads, hd = s["heads"], s["kv_heads"], s["hidden"] // s["heads"]
    eps = s["norm_eps"]
    cos, sin = rope_table(t, hd, s["rope_theta"])
    h = F.embedding(inputs, params["model.embed_tokens.weight"])
    for i in range(s["layers"]):
        p = lambda n: params[f"model.layers.{i}.{n}.weight"]  # noqa: E731
        xn = rmsnorm(h, p("input_layernorm"), eps)
        q = (xn @ p("self_attn.q_proj").t()).view(b, t, heads, hd)
        k = (xn @ p("self_attn.k_proj").t()).view(b, t, kv_heads, hd)
        v = (xn @ p("self_attn.v_proj").t()).view(b, t, kv_heads, hd)
        att = attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, heads, kv_heads)
        h = h + att @ p("self_attn.o_proj").t()
        xn = rmsnorm(h, p("post_attention_layernorm"), eps)
        act = F.silu(xn @ p("mlp.gate_proj").t()) * (xn @ p("mlp.up_proj").t())
        h = h + act @ p("mlp.down_proj").t()
    logits = rmsnorm(h, params["model.norm.weight"], eps) @ params["lm_head.weight"].t()
    return F.cross_entropy(logits.view(-1, s["vocab"]), targets.reshape(-1))


# ---- optimizer (device/cpu/ops.go adamw) ----

class AdamW:
    """torch's single-tensor AdamW written out in the Go trainer's exact operation
    order (m by lerp, as torch >= 2.0 does; torch 1.13's AdamW uses mul/add, which
    rounds differently), the step scalars computed in float64 and rounded to float32."""

    def __init__(self, params, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        self.lr, self.wd, self.betas, self.eps = lr, weight_decay, betas, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
        decay = f32(1 - self.lr * self.wd)
        omb1, b2t, omb2 = f32(1 - b1), f32(b2), f32(1 - b2)
        step_size = f32(self.lr / (1 - b1**self.t))
        bc2_sqrt = f32(math.sqrt(1 - b2**self.t))
        eps = f32(self.eps)
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            p.mul_(decay)
            m.add_(omb1 * (g - m))
            v.copy_(v * b2t + omb2 * (g * g))
            p.sub_(step_size * m / (torch.sqrt(v) / bc2_sqrt + eps))

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def train(s, seed, seq_len, global_batch, steps, lr, weight_decay):
    """Runs steps optimizer steps on one process; returns the per-step losses and times."""
    params = build_params(s, seed)
    opt = AdamW(params.values(), lr, weight_decay)
    losses, times = [], []
    for step in range(steps):
        start = time.perf_counter()
        inputs, targets = batch(seed, step * global_batch, global_batch, seq_len, s["vocab"])
        opt.zero_grad()
        loss = forward(s, params, inputs, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return losses, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-json", required=True, help="shapes.Shape as JSON, inline or a file path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True, help="global batch, samples per step")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--out", required=True, help="where to write the JSON result")
    a = ap.parse_args(argv)
    if a.seq_len <= 0 or a.batch <= 0 or a.steps <= 0 or not a.lr > 0 or a.weight_decay < 0 or a.seed < 0:
        ap.error("seq-len, batch, steps and lr must be positive; weight-decay and seed not negative")
    try:
        s = load_shape(a.model_json)
    except (OSError, ValueError, KeyError) as e:
        ap.error(f"--model-json: {e}")
    losses, times = train(s, a.seed & MASK64, a.seq_len, a.batch, a.steps, a.lr, a.weight_decay)
    result = {
        "model": s.get("name", ""),
        "seed": a.seed, "seq_len": a.seq_len, "global_batch": a.batch,
        "lr": a.lr, "weight_decay": a.weight_decay,
        "losses": losses, "step_seconds": times,
        "torch": torch.__version__,
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

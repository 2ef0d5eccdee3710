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
import os
import socket
import struct
import sys
import time
import traceback

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


def normal(key, n, j=None):
    """Standard normal values 0..n-1 of the stream keyed by key (float64), or the
    values at the indices j (a uint64 array) when given."""
    if j is None:
        j = np.arange(n, dtype=np.uint64)
    u1 = ((splitmix64(key, 2 * j) >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (splitmix64(key, 2 * j + np.uint64(1)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


# The same values with torch's vectorized ops, on any device, in chunks. torch has
# no uint64 arithmetic (1.13 none at all), so the stream runs in int64: two's
# complement addition, multiplication and xor give the same 64 bits as uint64's,
# and a logical right shift is the arithmetic one with the sign bits masked off.
# Integers, u1 and u2, the products and sqrt are exact or correctly rounded in
# both, so they agree bit for bit; log and cos are not (numpy's and torch's
# libraries, or CUDA's, may differ in the last bit of a float64). The float32
# that is kept differs only when the float64 lies within that error of a point
# halfway between two float32s: such values (about 1 in 30,000) are recomputed
# with numpy, so every float32 is the one normal() gives.

INIT_CHUNK = 1 << 24  # elements per chunk: ~1 GiB of int64 temporaries at most
# Relative distance to a float32 rounding midpoint within which a value is
# recomputed: far above any float64 log/cos library's error (a few ulps, 2^-50).
INIT_GUARD = 2.0**-40


def _i64(u):
    """The int64 with the bits of the uint64 u (a Python int)."""
    u &= MASK64
    return u - (1 << 64) if u >> 63 else u


def _lsr(z, k):
    """Logical right shift of int64 z by k bits, as uint64's."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def _splitmix64_t(key, j):
    """splitmix64(key, j) on int64 tensors (key a Python int)."""
    z = (j + 1) * _i64(GOLDEN) + _i64(key)
    z = (z ^ _lsr(z, 30)) * _i64(0xBF58476D1CE4E5B9)
    z = (z ^ _lsr(z, 27)) * _i64(0x94D049BB133111EB)
    return z ^ _lsr(z, 31)


def init_values(key, n, std, device="cpu"):
    """float32(std * normal(key, n)) as a float32 tensor on device, bit for bit
    what numpy gives, computed there with torch's vectorized ops."""
    out = torch.empty(n, dtype=torch.float32, device=device)
    key = int(key) & MASK64
    for lo in range(0, n, INIT_CHUNK):
        hi = min(n, lo + INIT_CHUNK)
        j = torch.arange(lo, hi, dtype=torch.int64, device=device)
        u1 = (_lsr(_splitmix64_t(key, 2 * j), 11) + 1).to(torch.float64) * 2.0**-53
        u2 = _lsr(_splitmix64_t(key, 2 * j + 1), 11).to(torch.float64) * 2.0**-53
        y = std * (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2))
        f = y.to(torch.float32)
        # A float32 midpoint lies within INIT_GUARD of y exactly when y's two
        # neighbours at that distance round to different float32s.
        near = (y * (1 - INIT_GUARD)).to(torch.float32) != (y * (1 + INIT_GUARD)).to(torch.float32)
        idx = near.nonzero().flatten()
        if idx.numel():
            redo = (std * normal(np.uint64(key), 0, (idx + lo).cpu().numpy().astype(np.uint64))).astype(np.float32)
            f[idx] = torch.from_numpy(redo).to(device)
        out[lo:hi] = f
    return out


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


def build_params(s, seed, device=None):
    """Every tensor's initial value by name, float32: float32(std *
    normal(seed ^ fnv1a64(name), j)) rounded once, or ones. On a CUDA device they
    are computed there (init_values: seconds for llama-1b, where numpy on the
    host took minutes); on the CPU numpy is as fast, and is the reference."""
    if device is None or torch.device(device).type == "cpu":
        return build_params_numpy(s, seed)
    params = {}
    for unit in layout(s):
        for name, shape, std in unit:
            n = int(np.prod(shape))
            if std is None:
                vals = torch.ones(n, dtype=torch.float32, device=device)
            else:
                vals = init_values((seed ^ fnv1a64(name)) & MASK64, n, std, device)
            params[name] = vals.reshape(shape).requires_grad_(True)
    # init_values's temporaries (up to ~1 GiB) would otherwise stay reserved by
    # the caching allocator and count in the run's reserved and device memory.
    torch.cuda.empty_cache()
    return params


def build_params_numpy(s, seed):
    """build_params with numpy on the host, one tensor at a time."""
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


# --data repeat (model/data.go: RepeatPattern, RepeatBatch): a short sequence
# of distinct tokens repeated, which a model learns, so the loss falls towards
# 0 (random tokens keep it near ln(vocab)). Plain Python integers, wrapped to
# 64 bits as Go's uint64 arithmetic is.

REPEAT_PERIOD = 32


def splitmix64_int(state, j):
    """splitmix64(state, j) on Python ints."""
    z = (state + (j + 1) * GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def repeat_pattern(seed, vocab):
    """min(vocab, REPEAT_PERIOD) distinct tokens: the first distinct values of
    splitmix64(seed ^ fnv1a64("data/repeat"), j) mod vocab, j = 0, 1, ..."""
    period = min(vocab, REPEAT_PERIOD)
    key = (seed ^ fnv1a64("data/repeat")) & MASK64
    seen, pattern, j = set(), [], 0
    while len(pattern) < period:
        tok = splitmix64_int(key, j) % vocab
        if tok not in seen:
            seen.add(tok)
            pattern.append(tok)
        j += 1
    return pattern


def repeat_tokens(seed, first_sample, n, seq_len, vocab):
    """The n samples' seq_len+1 tokens, as lists: sample i starts at offset
    splitmix64(seed ^ fnv1a64("data/repeat/offset"), i) mod period."""
    pattern = repeat_pattern(seed, vocab)
    period = len(pattern)
    key = (seed ^ fnv1a64("data/repeat/offset")) & MASK64
    rows = []
    for i in range(first_sample, first_sample + n):
        at = splitmix64_int(key, i) % period
        rows.append([pattern[(at + j) % period] for j in range(seq_len + 1)])
    return rows


def data_batch(data, seed, first_sample, n, seq_len, vocab):
    """The batch of data set data (--data): random (batch) or repeat."""
    if data == "repeat":
        toks = torch.tensor(repeat_tokens(seed, first_sample, n, seq_len, vocab), dtype=torch.int64).reshape(n, seq_len + 1)
        return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()
    return batch(seed, first_sample, n, seq_len, vocab)


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
    if q.is_cuda and hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        # On a GPU, fused attention (flash / memory-efficient) as any real FSDP
        # script uses: the probabilities are never stored, as in the Go trainer.
        # On the CPU the eager form below keeps the cross-engine parity tests exact.
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, t, heads * hd)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(b, t, heads * hd)


def embed_forward(s, p, inputs):
    """Token embeddings [b, t, hidden]."""
    return F.embedding(inputs, p["model.embed_tokens.weight"])


def block_forward(s, p, i, h, cos, sin):
    """Transformer block i (pre-norm attention and SwiGLU MLP, both residual)."""
    b, t, _ = h.shape
    heads, kv_heads, hd = s["heads"], s["kv_heads"], s["hidden"] // s["heads"]
    eps = s["norm_eps"]
    w = lambda n: p[f"model.layers.{i}.{n}.weight"]  # noqa: E731
    xn = rmsnorm(h, w("input_layernorm"), eps)
    q = (xn @ w("self_attn.q_proj").t()).view(b, t, heads, hd)
    k = (xn @ w("self_attn.k_proj").t()).view(b, t, kv_heads, hd)
    v = (xn @ w("self_attn.v_proj").t()).view(b, t, kv_heads, hd)
    att = attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, heads, kv_heads)
    h = h + att @ w("self_attn.o_proj").t()
    xn = rmsnorm(h, w("post_attention_layernorm"), eps)
    act = F.silu(xn @ w("mlp.gate_proj").t()) * (xn @ w("mlp.up_proj").t())
    return h + act @ w("mlp.down_proj").t()


def head_forward(s, p, h, targets):
    """Final norm, LM head and mean cross-entropy (computed in float32 whatever the
    activations' dtype, as mixed-precision trainers do)."""
    logits = rmsnorm(h, p["model.norm.weight"], s["norm_eps"]) @ p["lm_head.weight"].t()
    return F.cross_entropy(logits.float().view(-1, s["vocab"]), targets.reshape(-1))


def forward(s, params, inputs, targets):
    """Mean cross-entropy over the batch's tokens."""
    cos, sin = rope_table(inputs.shape[1], s["hidden"] // s["heads"], s["rope_theta"])
    h = embed_forward(s, params, inputs)
    for i in range(s["layers"]):
        h = block_forward(s, params, i, h, cos, sin)
    return head_forward(s, params, h, targets)


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


def train(s, seed, seq_len, global_batch, steps, lr, weight_decay, data="random"):
    """Runs steps optimizer steps on one process; returns the per-step losses and times."""
    params = build_params(s, seed)
    opt = AdamW(params.values(), lr, weight_decay)
    losses, times = [], []
    for step in range(steps):
        start = time.perf_counter()
        inputs, targets = data_batch(data, seed, step * global_batch, global_batch, seq_len, s["vocab"])
        opt.zero_grad()
        loss = forward(s, params, inputs, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return losses, times


# ---- distributed runs under torchrun (the backend's contract) ----

# EXIT_INFEASIBLE tells the Go backend that the configuration cannot run here (not a
# crash): it records the run as infeasible with the message printed on stderr.
EXIT_INFEASIBLE = 3
# EXIT_OOM tells the Go backend that the run ran out of memory.
EXIT_OOM = 4

SHARDED = ("full_shard", "shard_grad_op", "hybrid_shard")


class Infeasible(Exception):
    """The configuration cannot run with this torch on this machine."""


class Unit(torch.nn.Module):
    """One wrap unit of the Go trainer (embedding, a transformer block, or the final
    norm with the LM head): its named leaf tensors as nn.Parameters, so DDP and FSDP
    can wrap each unit, and a forward that is the functional one above."""

    def __init__(self, s, params, names):
        super().__init__()
        self.s = s
        self.names = names
        self.plist = torch.nn.ParameterList([torch.nn.Parameter(params[n].detach().clone()) for n in names])

    def p(self):
        return dict(zip(self.names, self.plist))


class Embed(Unit):
    def forward(self, inputs):
        return embed_forward(self.s, self.p(), inputs)


class Block(Unit):
    def __init__(self, s, params, names, i):
        super().__init__(s, params, names)
        self.i = i

    def forward(self, h, cos, sin):
        return block_forward(self.s, self.p(), self.i, h, cos, sin)


class Head(Unit):
    def forward(self, h, targets):
        return head_forward(self.s, self.p(), h, targets)


class Model(torch.nn.Module):
    """The Go trainer's model as modules: embed, layers[i], head (its wrap units, in
    the order FSDP flattens them). With checkpointing, each block's activations are
    recomputed in backward (torch.utils.checkpoint, non-reentrant)."""

    def __init__(self, s, params, checkpointing=False):
        super().__init__()
        units = [[n for n, _, _ in u] for u in layout(s)]
        self.s = s
        self.checkpointing = checkpointing
        self.embed = Embed(s, params, units[0])
        self.layers = torch.nn.ModuleList(Block(s, params, u, i) for i, u in enumerate(units[1:-1]))
        self.head = Head(s, params, units[-1])

    def forward(self, inputs, targets):
        cos, sin = rope_table(inputs.shape[1], self.s["hidden"] // self.s["heads"], self.s["rope_theta"])
        cos, sin = cos.to(inputs.device), sin.to(inputs.device)
        h = self.embed(inputs)
        for blk in self.layers:
            if self.checkpointing:
                from torch.utils.checkpoint import checkpoint
                h = checkpoint(blk, h, cos, sin, use_reentrant=False)
            else:
                h = blk(h, cos, sin)
        return self.head(h, targets)


class HFModel(torch.nn.Module):
    """Any Hugging Face causal LM built from a config.json with random weights
    (nothing is downloaded); its decoder layers are the wrap units."""

    def __init__(self, config_path, checkpointing=False):
        super().__init__()
        try:
            import transformers
        except ImportError as e:
            raise Infeasible("model_impl transformers needs the transformers package in this python") from e
        import os
        cfg = transformers.AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(config_path)))
        self.model = transformers.AutoModelForCausalLM.from_config(cfg)
        if checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.vocab = cfg.vocab_size
        inner = getattr(self.model, "model", None) or getattr(self.model, "transformer", None)
        self.layers = getattr(inner, "layers", None) or getattr(inner, "h", None)
        if self.layers is None:
            raise Infeasible(f"{config_path}: cannot find the decoder layers of {type(self.model).__name__} to wrap")

    def forward(self, inputs, targets):
        logits = self.model(input_ids=inputs).logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def peak_memory(device):
    """Peak memory figures of this process, in bytes, and the CUDA caching
    allocator's retries and OOMs (a run that only fits by flushing the cache is
    slower than its peak suggests)."""
    out = {}
    if device.type == "cuda":
        out["peak_mem_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        out["peak_mem_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
        stats = torch.cuda.memory_stats(device)
        out["alloc_retries"] = int(stats.get("num_alloc_retries", 0))
        out["cuda_ooms"] = int(stats.get("num_ooms", 0))
    import resource
    # ru_maxrss is KiB on Linux.
    out["peak_rss_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    return out


def fsdp2_api():
    """torch's fully_shard and its policies, or None before torch 2.6 exported them."""
    try:
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy
    except ImportError:
        return None
    return fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def wrap(model, a, device, dist):
    """DDP for ddp/no_shard; FSDP2 (fully_shard per block, then the root) when torch
    has it and fsdp_api is not 1, FSDP1 otherwise. FSDP needs CUDA (torch's CPU
    FSDP is not what anyone benchmarks, and torch 1.13 refuses it)."""
    units = list(model.layers)
    if a.compile:
        if not hasattr(torch, "compile"):
            raise Infeasible(f"torch {torch.__version__} has no torch.compile; set compile: false")
        for i, blk in enumerate(units):
            units[i] = torch.compile(blk)
            model.layers[i] = units[i]
    if a.sharding in ("ddp", "no_shard"):
        if a.cpu_offload:
            raise Infeasible("cpu_offload needs a sharded strategy (FSDP); DDP keeps every state on the device")
        if dist is None:
            return model
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if device.type != "cuda":
        raise Infeasible(f"torch {torch.__version__} on CPU cannot run FSDP ({a.sharding}); use ddp/no_shard or a CUDA machine")
    api = fsdp2_api() if a.fsdp_api != 1 else None
    if a.fsdp_api == 2 and api is None:
        raise Infeasible(f"torch {torch.__version__} has no FSDP2 (fully_shard); set backend_options.fsdp_api: 1")
    if api is not None:
        return wrap_fsdp2(model, units, a, api)
    return wrap_fsdp1(model, units, a, device)


def wrap_fsdp2(model, units, a, api):
    fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy = api
    if a.backward_prefetch == "backward_post":
        raise Infeasible("FSDP2 has no backward_post prefetch; use backward_pre/none or backend_options.fsdp_api: 1")
    if a.wrap_policy != "transformer":
        raise Infeasible(f"wrap_policy {a.wrap_policy}: FSDP2 shards per module; use wrap_policy: transformer or fsdp_api: 1")
    from torch.distributed.device_mesh import init_device_mesh
    ws = int(__import__("os").environ.get("WORLD_SIZE", "1"))
    if a.sharding == "hybrid_shard":
        # Replicate across nodes, shard inside a node (HSDP through a 2-D mesh).
        mesh = init_device_mesh("cuda", (ws // a.gpus_per_node, a.gpus_per_node), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cuda", (ws,))
    kw = {"mesh": mesh, "reshard_after_forward": a.sharding != "shard_grad_op"}
    if a.mixed_precision in DTYPES:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=DTYPES[a.mixed_precision], reduce_dtype=torch.float32)
    if a.cpu_offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for blk in units:
        fully_shard(blk, **kw)
    fully_shard(model, **kw)
    # Explicit prefetch: the next block's all-gather is issued before this one's
    # compute (forward) and the previous block's before this one's backward.
    for i, blk in enumerate(units):
        if a.forward_prefetch and i + 1 < len(units):
            blk.set_modules_to_forward_prefetch([units[i + 1]])
        if a.backward_prefetch == "none":
            blk.set_modules_to_backward_prefetch([])
        elif i > 0:
            blk.set_modules_to_backward_prefetch([units[i - 1]])
    return model


def wrap_fsdp1(model, units, a, device):
    import functools
    from torch.distributed.fsdp import (FullyShardedDataParallel as FSDP, ShardingStrategy, BackwardPrefetch,
                                        MixedPrecision, CPUOffload)
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy
    strategy = {"full_shard": ShardingStrategy.FULL_SHARD, "shard_grad_op": ShardingStrategy.SHARD_GRAD_OP,
                "hybrid_shard": ShardingStrategy.HYBRID_SHARD}[a.sharding]
    if a.wrap_policy == "transformer":
        # Each decoder layer is a unit (and, for the built-in model, the embedding
        # and the head, as the Go trainer wraps them).
        policy = ModuleWrapPolicy({type(u) for u in units} | ({Embed, Head} if isinstance(model, Model) else set()))
    else:
        policy = functools.partial(size_based_auto_wrap_policy, min_num_params=int(a.wrap_policy.split(":", 1)[1]))
    prefetch = {"backward_pre": BackwardPrefetch.BACKWARD_PRE, "backward_post": BackwardPrefetch.BACKWARD_POST,
                "none": None}[a.backward_prefetch]
    mp = None
    if a.mixed_precision in DTYPES:
        d = DTYPES[a.mixed_precision]
        mp = MixedPrecision(param_dtype=d, reduce_dtype=torch.float32, buffer_dtype=d)
    return FSDP(model, sharding_strategy=strategy, auto_wrap_policy=policy, backward_prefetch=prefetch,
                forward_prefetch=a.forward_prefetch, mixed_precision=mp, cpu_offload=CPUOffload(offload_params=a.cpu_offload),
                device_id=device, use_orig_params=True, limit_all_gathers=True)


def emit(obj):
    """One FSDPBENCH line on stdout, which the Go backend parses as an event."""
    print("FSDPBENCH " + json.dumps(obj), flush=True)


def optimizer(model, a, device):
    """On CPU, the Go trainer's AdamW operation for operation (the parity runs); on
    CUDA, torch's own AdamW (fused where it can), which is what a benchmark of
    PyTorch should time."""
    params = [p for p in model.parameters() if p.requires_grad]
    if device.type == "cpu":
        return AdamW(params, a.lr, a.weight_decay)
    kw = {"lr": a.lr, "weight_decay": a.weight_decay}
    try:
        return torch.optim.AdamW(params, fused=True, **kw)
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(params, foreach=True, **kw)


# ---- checkpointing as a measured phase (issue 17) ----

def dcp_module():
    """torch.distributed.checkpoint, which torch 1.13 ships as
    torch.distributed._shard.checkpoint."""
    try:
        import torch.distributed.checkpoint as dcp
        if hasattr(dcp, "FileSystemWriter"):
            return dcp
    except ImportError:
        pass
    import torch.distributed._shard.checkpoint as dcp
    return dcp


def ckpt_tensors(model, opt):
    """name -> tensor of what a checkpoint holds: every parameter and AdamW's m
    and v for it (the Go trainer's checkpoint content), in parameter order."""
    out = {}
    if isinstance(opt, AdamW):
        moments = {id(p): (m, v) for p, m, v in zip(opt.params, opt.m, opt.v)}
    else:
        moments = {id(p): (st.get("exp_avg"), st.get("exp_avg_sq")) for p, st in opt.state.items()}
    for n, p in model.named_parameters():
        out["model." + n] = p
        m, v = moments.get(id(p), (None, None))
        if m is None:
            raise Infeasible(f"checkpoint: parameter {n} has no AdamW state yet; save after a step")
        out["optim.m." + n], out["optim.v." + n] = m, v
    return out


def opt_step_count(opt):
    if isinstance(opt, AdamW):
        return opt.t
    return int(next(iter(opt.state.values()))["step"])


def set_opt_step_count(opt, t):
    if isinstance(opt, AdamW):
        opt.t = t
    else:
        for st in opt.state.values():
            st["step"] = torch.as_tensor(float(t)) if torch.is_tensor(st["step"]) else t


class Checkpointer:
    """Saves checkpoints every --checkpoint-every measured steps and reloads the
    first one for the resume check; reports save/load times and bytes per rank.

    sharded: torch.distributed.checkpoint (DCP), each rank writing its own part.
    Under DDP every rank holds the whole replica, and DCP's default planner writes
    plain tensors from the coordinator only (rank 0 writes everything), so each
    tensor is split evenly into world-size pieces, rank r's piece wrapped as a
    ShardedTensor: each rank writes 1/N of the state (ZeRO-style), and loading
    all-gathers the pieces back into the replica. Under FSDP on CUDA the model's
    own sharded state dict (torch.distributed.checkpoint.state_dict) is saved.
    full: the whole state on rank 0 (gathered there under FSDP: full_state_dict,
    rank 0 only), torch.save'd to full.pt; loading broadcasts it from rank 0."""

    def __init__(self, a, rank, ws, dist, device):
        self.a, self.rank, self.ws, self.dist, self.device = a, rank, ws, dist, device
        self.fsdp = a.sharding in SHARDED
        self.save_s, self.load_s, self.bytes = [], None, 0
        self.first_dir, self.first_step, self.last_dir = None, None, None
        self.resume_exact = None

    def barrier(self):
        if self.dist is not None:
            self.dist.barrier()

    def save(self, model, opt, measured, step):
        d = os.path.join(self.a.checkpoint_dir, f"step-{measured}")
        self.barrier()
        start = time.perf_counter()
        if self.rank == 0:
            os.makedirs(d, exist_ok=True)
        self.barrier()
        if self.fsdp or not isinstance(opt, AdamW):
            self._save_fsdp(model, opt, d, step)
        elif self.a.checkpoint == "sharded":
            self._save_sharded(model, opt, d, step)
        else:
            self._save_full(model, opt, d, step)
        self.barrier()
        self.save_s.append(time.perf_counter() - start)
        self.bytes = self._bytes(d)
        prev, self.last_dir = self.last_dir, d
        if self.first_dir is None:
            self.first_dir, self.first_step = d, step
        if self.rank == 0 and prev is not None and (prev != self.first_dir or not self.a.resume_check):
            import shutil
            shutil.rmtree(prev)

    def _bytes(self, d):
        """What this rank wrote into d: its DCP files (__<rank>_*.distcp) and, on
        rank 0, the metadata or full.pt."""
        n = 0
        for name in os.listdir(d):
            mine = name.startswith(f"__{self.rank}_") or (self.rank == 0 and not name.startswith("__"))
            if mine:
                n += os.path.getsize(os.path.join(d, name))
        return n

    def _pieces(self, model, opt, step):
        """The state as ShardedTensors of this rank's even piece of each tensor
        (dim 0 of the flattened tensor), with the step count as a plain tensor."""
        from torch.distributed._shard.sharded_tensor import Shard, ShardMetadata, init_from_local_shards
        state = {"optim.step": torch.tensor([step, opt_step_count(opt)], dtype=torch.int64)}
        for name, t in ckpt_tensors(model, opt).items():
            flat = t.detach().reshape(-1)
            lo, hi = self._bounds(flat.numel(), self.rank)
            shards = []
            if hi > lo:
                md = ShardMetadata(shard_offsets=[lo], shard_sizes=[hi - lo], placement=f"rank:{self.rank}/cpu")
                shards.append(Shard(flat[lo:hi].clone(), md))
            state[name] = init_from_local_shards(shards, flat.numel())
        return state

    def _bounds(self, n, r):
        per = -(-n // self.ws)
        return min(r * per, n), min((r + 1) * per, n)

    def _dcp(self):
        """torch.distributed.checkpoint, or None where this torch cannot import it
        (Debian's torch 1.13 under Python 3.11: torch.distributed._shard fails on
        a dataclass default), said once on stderr."""
        if not hasattr(self, "_dcp_mod"):
            try:
                self._dcp_mod = dcp_module()
            except (ImportError, ValueError, TypeError) as e:
                self._dcp_mod = None
                if self.rank == 0:
                    print(f"fsdpbench: torch.distributed.checkpoint is unusable with torch {torch.__version__} here ({e}); "
                          "sharded checkpoints are written with torch.save instead, each rank its even piece of every "
                          "tensor (__<rank>_0.pt)", file=sys.stderr, flush=True)
        return self._dcp_mod

    def _local_pieces(self, model, opt, step):
        """This rank's even piece of every tensor, as plain tensors."""
        state = {"optim.step": torch.tensor([step, opt_step_count(opt)], dtype=torch.int64)}
        for name, t in ckpt_tensors(model, opt).items():
            flat = t.detach().reshape(-1)
            lo, hi = self._bounds(flat.numel(), self.rank)
            state[name] = flat[lo:hi].clone()
        return state

    def _save_sharded(self, model, opt, d, step):
        dcp = self._dcp()
        if dcp is None:
            path = os.path.join(d, f"__{self.rank}_0.pt")
            torch.save(self._local_pieces(model, opt, step), path + ".tmp")
            os.replace(path + ".tmp", path)
            return
        if self.dist is None:  # one process: DCP without collectives
            dcp.save_state_dict(self._local_pieces(model, opt, step), dcp.FileSystemWriter(d), no_dist=True)
            return
        dcp.save_state_dict(self._pieces(model, opt, step), dcp.FileSystemWriter(d))

    def _save_full(self, model, opt, d, step):
        if self.rank == 0:
            state = {k: t.detach().cpu() for k, t in ckpt_tensors(model, opt).items()}
            state["optim.step"] = torch.tensor([step, opt_step_count(opt)], dtype=torch.int64)
            tmp = os.path.join(d, "full.pt.tmp")
            torch.save(state, tmp)
            os.replace(tmp, os.path.join(d, "full.pt"))

    def _save_fsdp(self, model, opt, d, step):
        # torch's own optimizer (CUDA) or FSDP: torch >= 2.2's
        # torch.distributed.checkpoint.state_dict; not run on the CPU machines
        # this project is tested on.
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
        dcp = dcp_module()
        full = self.a.checkpoint == "full"
        msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=full, cpu_offload=full))
        state = {"model": msd, "optim": osd, "step": torch.tensor([step])}
        if not full:
            dcp.save(state, checkpoint_id=d)
        elif self.rank == 0:
            torch.save(state, os.path.join(d, "full.pt"))

    def load(self, model, opt):
        """Loads the first checkpoint into a fresh model and optimizer."""
        self.barrier()
        start = time.perf_counter()
        d = self.first_dir
        if self.fsdp or not isinstance(opt, AdamW):
            self._load_fsdp(model, opt, d)
        else:
            # One step of the fresh optimizer's state must exist to load into: a
            # torch AdamW creates it lazily; the project's AdamW has it.
            target = ckpt_tensors(model, opt)
            if self.a.checkpoint == "sharded":
                step = self._load_sharded(model, opt, d, target)
            else:
                step = self._load_full(d, target)
            set_opt_step_count(opt, step)
        self.barrier()
        self.load_s = time.perf_counter() - start

    def _load_sharded(self, model, opt, d, target):
        dcp = self._dcp()
        if dcp is None:
            state = torch.load(os.path.join(d, f"__{self.rank}_0.pt"))
            local = lambda k: state[k]  # noqa: E731
        elif self.dist is None:
            state = self._local_pieces(model, opt, 0)
            dcp.load_state_dict(state, dcp.FileSystemReader(d), no_dist=True)
            local = lambda k: state[k]  # noqa: E731
        else:
            state = self._pieces(model, opt, 0)
            dcp.load_state_dict(state, dcp.FileSystemReader(d))

            def local(k):
                mine = state[k].local_shards()
                return mine[0].tensor if mine else torch.empty(0)
        with torch.no_grad():
            for k, t in target.items():
                n = t.numel()
                if self.dist is None:
                    t.copy_(local(k).view_as(t))
                    continue
                per = -(-n // self.ws)
                piece = torch.zeros(per, dtype=t.dtype)
                mine = local(k)
                piece[:mine.numel()] = mine
                parts = [torch.empty(per, dtype=t.dtype) for _ in range(self.ws)]
                self.dist.all_gather(parts, piece)
                t.copy_(torch.cat(parts)[:n].view_as(t))
        return int(state["optim.step"][1])

    def _load_full(self, d, target):
        state = torch.load(os.path.join(d, "full.pt")) if self.rank == 0 else None
        step = torch.zeros(2, dtype=torch.int64)
        with torch.no_grad():
            if self.rank == 0:
                step.copy_(state["optim.step"])
            if self.dist is not None:
                self.dist.broadcast(step, 0)
            for k, t in target.items():
                if self.rank == 0:
                    t.copy_(state[k])
                if self.dist is not None:
                    self.dist.broadcast(t.data, 0)
        return int(step[1])

    def _load_fsdp(self, model, opt, d):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
        dcp = dcp_module()
        full = self.a.checkpoint == "full"
        if not full:
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd, "step": torch.tensor([0])}
            dcp.load(state, checkpoint_id=d)
            set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            return
        state = torch.load(os.path.join(d, "full.pt")) if self.rank == 0 else {"model": {}, "optim": {}}
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))

    def report(self):
        """The rank file's checkpoint keys (backends/contract)."""
        out = {"checkpoint_save_s": self.save_s, "checkpoint_bytes": self.bytes}
        if self.load_s is not None:
            out["checkpoint_load_s"] = self.load_s
        if self.resume_exact is not None:
            out["resume_exact"] = self.resume_exact
        return out


PROFILE_STEPS = 3  # steps torch.profiler records (the harness reads at most this many)


def profile(model, opt, train_step, first, steps, rank):
    """Records up to PROFILE_STEPS steps with torch.profiler after the measured
    ones, when the harness asks for them ($FSDPBENCH_PROFILE_DIR set): their
    Chrome trace, rank-<r>.pt.trace.json, is where the harness reads compute,
    communication and exposed communication from. The profiled steps come after
    the measured steps and are not among them: the profiler slows a step down
    (its overhead is reported beside the figures), so the throughput comes from
    unprofiled steps only. One unrecorded profiler warm-up step comes first, as
    torch.profiler's schedule recommends (its first step carries the start-up
    cost). The steps train on the batches after the measured ones."""
    d = os.environ.get("FSDPBENCH_PROFILE_DIR")
    if not d:
        return
    active = min(PROFILE_STEPS, steps)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"rank-{rank}.pt.trace.json")

    def ready(p):
        p.export_chrome_trace(path + ".tmp")
        os.replace(path + ".tmp", path)

    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available() and os.environ.get("FSDPBENCH_DEVICE", "") != "cpu":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts, schedule=torch.profiler.schedule(wait=0, warmup=1, active=active, repeat=1),
                                on_trace_ready=ready) as p:
        for step in range(first, first + 1 + active):
            train_step(model, opt, step)
            p.step()


def run_distributed(a, s):
    """Trains under torchrun's environment (or alone when WORLD_SIZE is unset) and
    writes rank-<r>.json to $FSDPBENCH_METRICS_DIR."""
    import contextlib
    import os
    ws = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and os.environ.get("FSDPBENCH_DEVICE", "") != "cpu"
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if a.sharding in SHARDED and not use_cuda:
        raise Infeasible(f"torch {torch.__version__} on CPU cannot run FSDP ({a.sharding}); use ddp/no_shard or a CUDA machine")
    if a.mixed_precision != "fp32" and not use_cuda:
        raise Infeasible(f"mixed precision {a.mixed_precision} on CPU is not what this script benchmarks; use fp32")
    if a.sharding == "hybrid_shard" and ws % a.gpus_per_node:
        raise Infeasible(f"hybrid_shard: world size {ws} is not a multiple of gpus_per_node {a.gpus_per_node}")
    dist = None
    if ws > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl" if use_cuda else "gloo")
    def build():
        if a.model_impl == "transformers":
            m = HFModel(a.hf_config, a.activation_checkpointing)
            v = m.vocab
        else:
            m = Model(s, build_params(s, a.seed & MASK64, device), a.activation_checkpointing)
            v = s["vocab"]
        m = wrap(m.to(device), a, device, dist)
        return m, optimizer(m, a, device), v

    model, opt, vocab = build()
    # DDP under bf16/fp16 is autocast (fp32 weights, low-precision compute); FSDP casts
    # parameters itself (MixedPrecisionPolicy / MixedPrecision).
    autocast = contextlib.nullcontext
    if a.mixed_precision in DTYPES and a.sharding in ("ddp", "no_shard"):
        autocast = lambda: torch.autocast("cuda", dtype=DTYPES[a.mixed_precision])  # noqa: E731
    scaler = torch.cuda.amp.GradScaler() if a.mixed_precision == "fp16" and a.sharding in ("ddp", "no_shard") else None
    bpd, accum = a.batch_per_device, a.grad_accum
    G = ws * bpd * accum
    steps = []
    measured_start = None

    def train_step(model, opt, step):
        """One optimizer step on global batch step; returns the mean loss over
        ranks and the step's wall time."""
        start = time.perf_counter()
        opt.zero_grad()
        local = 0.0
        for k in range(accum):
            first = step * G + k * ws * bpd + rank * bpd
            inputs, targets = data_batch(a.data, a.seed & MASK64, first, bpd, a.seq_len, vocab)
            inputs, targets = inputs.to(device), targets.to(device)
            last = k == accum - 1
            sync = contextlib.nullcontext()
            if not last and hasattr(model, "no_sync"):
                sync = model.no_sync()
            elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
                model.set_requires_gradient_sync(last)
            with sync, autocast():
                loss = model(inputs, targets) / accum
            (scaler.scale(loss) if scaler else loss).backward()
            local += loss.detach()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        lt = torch.as_tensor(local, dtype=torch.float32, device=device).reshape(1)
        if dist is not None:
            dist.all_reduce(lt)
            lt /= ws
        if use_cuda:
            torch.cuda.synchronize()
        return float(lt.item()), time.perf_counter() - start

    ckpt = Checkpointer(a, rank, ws, dist, device) if a.checkpoint != "none" else None
    for step in range(a.warmup_steps + a.steps):
        if step == a.warmup_steps:
            if dist is not None:
                dist.barrier()
            if use_cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(device)
            measured_start = time.perf_counter()
        loss, dt = train_step(model, opt, step)
        if step >= a.warmup_steps:
            rec = {"step": step - a.warmup_steps + 1, "loss": loss, "step_time_s": dt,
                   "tokens": bpd * accum * a.seq_len}
            steps.append(rec)
            if rank == 0:
                emit(dict(rec, rank=rank))
            if ckpt is not None and rec["step"] % a.checkpoint_every == 0:
                # Outside the measured step: the save is a phase of its own.
                wall_paused = time.perf_counter()
                ckpt.save(model, opt, rec["step"], step + 1)
                measured_start += time.perf_counter() - wall_paused
    wall = time.perf_counter() - measured_start
    profile(model, opt, train_step, a.warmup_steps + a.steps, a.steps, rank)
    out = {"rank": rank, "world_size": ws, "sharding": a.sharding, "device": device.type,
           "tokens": bpd * accum * a.seq_len * a.steps, "measured_wall_s": wall,
           "steps": steps, "torch": torch.__version__,
           # which node the rank ran on: multi-node runs show their placement
           "host": socket.gethostname()}
    if use_cuda:
        out["gpu"] = torch.cuda.get_device_name(device)
        out["cuda"] = torch.version.cuda
        if hasattr(torch.cuda, "nccl"):
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    out.update(peak_memory(device))
    # The spec's environment variables (env:) as this rank received them, so a
    # run shows that each of its ranks got them.
    names = [k for k in os.environ.get("FSDPBENCH_SPEC_ENV", "").split(",") if k]
    if names:
        out["spec_env"] = {k: os.environ.get(k) for k in names}
    if ckpt is not None:
        if a.resume_check:
            # A fresh model and optimizer load the first checkpoint and train the
            # steps after it; their losses must equal the ones above bit for bit.
            del model, opt
            model, opt, _ = build()
            ckpt.load(model, opt)
            resumed = [train_step(model, opt, st)[0] for st in range(ckpt.first_step, a.warmup_steps + a.steps)]
            want = [rec["loss"] for rec in steps[a.checkpoint_every:]]
            ckpt.resume_exact = len(resumed) == len(want) and all(
                struct.pack("<d", x) == struct.pack("<d", y) for x, y in zip(resumed, want))
        out.update(ckpt.report())
    d = os.environ.get("FSDPBENCH_METRICS_DIR")
    if d:
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"rank-{rank}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        os.replace(path + ".tmp", path)
    if dist is not None:
        # Every rank has written its report; the barrier keeps any rank from
        # leaving while a peer still talks to it. The process group is left
        # alive on purpose: main ends the process with os._exit (see there).
        dist.barrier()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-json", help="shapes.Shape as JSON, inline or a file path (the built-in model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batch", type=int, help="single-process mode: global batch, samples per step")
    ap.add_argument("--steps", type=int, required=True, help="measured steps")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--data", default="random", choices=("random", "repeat"),
                    help="synthetic data: random tokens (the loss stays near ln(vocab)) or a repeated sequence the model learns")
    ap.add_argument("--out", help="single-process mode: where to write the JSON result")
    ap.add_argument("--sharding", choices=("ddp", "no_shard") + SHARDED,
                    help="distributed mode (under torchrun): the strategy")
    ap.add_argument("--batch-per-device", type=int, default=1)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--mixed-precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--gpus-per-node", type=int, default=0, help="hybrid_shard's shard group size (default: world size)")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--backward-prefetch", default="backward_pre", choices=("backward_pre", "backward_post", "none"))
    ap.add_argument("--forward-prefetch", action="store_true")
    ap.add_argument("--cpu-offload", action="store_true")
    ap.add_argument("--wrap-policy", default="transformer", help="transformer, or size:<min params> (FSDP1)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each block")
    ap.add_argument("--fsdp-api", type=int, default=0, choices=(0, 1, 2), help="0: FSDP2 when torch has it, else FSDP1")
    ap.add_argument("--model-impl", default="builtin", choices=("builtin", "transformers"))
    ap.add_argument("--checkpoint", default="none", choices=("none", "sharded", "full"),
                    help="save sharded (torch.distributed.checkpoint) or full (rank 0) checkpoints")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="measured steps between checkpoints")
    ap.add_argument("--resume-check", action="store_true",
                    help="reload the first checkpoint into a fresh model and compare the losses after it")
    ap.add_argument("--checkpoint-dir", default="",
                    help="where checkpoints go (default: $FSDPBENCH_RUN_DIR/checkpoint)")
    ap.add_argument("--hf-config", help="with --model-impl transformers: the config.json")
    a = ap.parse_args(argv)
    if a.seq_len <= 0 or a.steps <= 0 or not a.lr > 0 or a.weight_decay < 0 or a.seed < 0:
        ap.error("seq-len, steps and lr must be positive; weight-decay and seed not negative")
    s = None
    if a.model_impl == "builtin":
        if not a.model_json:
            ap.error("--model-json is required for the built-in model")
        try:
            s = load_shape(a.model_json)
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--model-json: {e}")
    if a.sharding is not None:
        if a.batch_per_device <= 0 or a.grad_accum <= 0 or a.warmup_steps < 0:
            ap.error("batch-per-device and grad-accum must be positive, warmup-steps not negative")
        if a.checkpoint != "none":
            if not 0 < a.checkpoint_every <= a.steps - (1 if a.resume_check else 0):
                ap.error("checkpoint-every must be from 1 to steps (below steps with --resume-check)")
            if not a.checkpoint_dir:
                run_dir = os.environ.get("FSDPBENCH_RUN_DIR")
                if not run_dir:
                    ap.error("--checkpoint needs --checkpoint-dir or $FSDPBENCH_RUN_DIR")
                a.checkpoint_dir = os.path.join(run_dir, "checkpoint")
        elif a.resume_check:
            ap.error("--resume-check needs --checkpoint sharded or full")
        if a.gpus_per_node <= 0:
            a.gpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        if a.model_impl == "transformers" and not a.hf_config:
            ap.error("--model-impl transformers needs --hf-config")
        try:
            code = run_distributed(a, s)
        except Infeasible as e:
            print(f"fsdpbench: infeasible: {e}", file=sys.stderr, flush=True)
            code = EXIT_INFEASIBLE
        except RuntimeError as e:
            if "out of memory" in str(e):  # torch.OutOfMemoryError is a RuntimeError
                print(f"fsdpbench: out of memory: {e}", file=sys.stderr, flush=True)
                code = EXIT_OOM
            else:
                traceback.print_exc()
                code = 1
        except Exception:  # pylint: disable=broad-except
            traceback.print_exc()
            code = 1
        # A distributed rank ends here at once, without destroy_process_group or
        # Python's teardown. Under torch 1.13 with gloo, freeing DDP's Reducer
        # after the process group's last other reference is gone runs
        # ~ProcessGroupGloo on the main thread, which joins gloo's worker threads
        # while holding the GIL, and a worker that is freeing a tensor with a
        # Python object waits for the GIL: the rank hung at exit until the run's
        # time limit (one run in three through Slurm under load; gdb showed
        # ~ProcessGroupGloo in std::thread::join and the worker in
        # TensorImpl::destroy_pyobj_if_needed). Reports are written and renamed
        # into place before this; only the standard streams need flushing.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if a.batch is None or a.batch <= 0 or a.out is None:
        ap.error("single-process mode needs a positive --batch and --out (or give --sharding)")
    losses, times = train(s, a.seed & MASK64, a.seq_len, a.batch, a.steps, a.lr, a.weight_decay, a.data)
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

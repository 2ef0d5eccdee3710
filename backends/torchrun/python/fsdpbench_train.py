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


# ---- distributed runs under torchrun (the backend's contract) ----

# EXIT_INFEASIBLE tells the Go backend that the configuration cannot run here (not a
# crash): it records the run as infeasible with the message printed on stderr.
EXIT_INFEASIBLE = 3
# EXIT_OOM tells the Go backend that the run ran out of memory.
EXIT_OOM = 4

SHARDED = ("full_shard", "shard_grad_op", "hybrid_shard")


class Infeasible(Exception):
    """The configuration cannot run with this torch on this machine."""


class ParamModule(torch.nn.Module):
    """Holds the named leaf tensors as nn.Parameters so DDP/FSDP can wrap them; the
    forward is the functional one above over the same tensors."""

    def __init__(self, s, params):
        super().__init__()
        self.s = s
        self.names = list(params)
        self.plist = torch.nn.ParameterList([torch.nn.Parameter(params[n].detach().clone()) for n in self.names])

    def forward(self, inputs, targets):
        return forward(self.s, dict(zip(self.names, self.plist)), inputs, targets)


def peak_memory(device):
    """Peak memory figures of this process, in bytes."""
    out = {}
    if device.type == "cuda":
        out["peak_mem_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        out["peak_mem_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    import resource
    # ru_maxrss is KiB on Linux.
    out["peak_rss_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    return out


def wrap(model, sharding, device, dist):
    """DDP for ddp/no_shard; FSDP2 (fully_shard) when torch has it, FSDP1 on CUDA
    otherwise, for sharded strategies."""
    if sharding in ("ddp", "no_shard"):
        if dist is None:
            return model
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if device.type != "cuda":
        raise Infeasible(f"torch {torch.__version__} on CPU cannot run FSDP ({sharding}); use ddp/no_shard or a CUDA machine")
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        fully_shard = None
    if fully_shard is not None and sharding != "hybrid_shard":
        fully_shard(model, reshard_after_forward=(sharding == "full_shard"))
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    strategy = {"full_shard": ShardingStrategy.FULL_SHARD, "shard_grad_op": ShardingStrategy.SHARD_GRAD_OP,
                "hybrid_shard": ShardingStrategy.HYBRID_SHARD}[sharding]
    return FSDP(model, sharding_strategy=strategy, device_id=device, use_orig_params=True)


def emit(obj):
    """One FSDPBENCH line on stdout, which the Go backend parses as an event."""
    print("FSDPBENCH " + json.dumps(obj), flush=True)


def run_distributed(a, s):
    """Trains under torchrun's environment (or alone when WORLD_SIZE is unset) and
    writes rank-<r>.json to $FSDPBENCH_METRICS_DIR."""
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
    if a.mixed_precision != "fp32":
        raise Infeasible(f"mixed precision {a.mixed_precision} is not implemented by the reference script; use fp32")
    dist = None
    if ws > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl" if use_cuda else "gloo")
    model = ParamModule(s, build_params(s, a.seed & MASK64)).to(device)
    model = wrap(model, a.sharding, device, dist)
    opt = AdamW(model.parameters(), a.lr, a.weight_decay)
    bpd, accum = a.batch_per_device, a.grad_accum
    G = ws * bpd * accum
    steps = []
    measured_start = None
    for step in range(a.warmup_steps + a.steps):
        if step == a.warmup_steps:
            if dist is not None:
                dist.barrier()
            if use_cuda:
                torch.cuda.synchronize()
            measured_start = time.perf_counter()
        start = time.perf_counter()
        opt.zero_grad()
        local = 0.0
        for k in range(accum):
            first = step * G + k * ws * bpd + rank * bpd
            inputs, targets = batch(a.seed & MASK64, first, bpd, a.seq_len, s["vocab"])
            inputs, targets = inputs.to(device), targets.to(device)
            ctx = model.no_sync() if (k < accum - 1 and hasattr(model, "no_sync")) else _null()
            with ctx:
                loss = model(inputs, targets) / accum
                loss.backward()
            local += loss.detach()
        opt.step()
        lt = torch.as_tensor(local, dtype=torch.float32, device=device).reshape(1)
        if dist is not None:
            dist.all_reduce(lt)
            lt /= ws
        if use_cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - start
        if step >= a.warmup_steps:
            rec = {"step": step - a.warmup_steps + 1, "loss": float(lt.item()), "step_time_s": dt,
                   "tokens": bpd * accum * a.seq_len}
            steps.append(rec)
            if rank == 0:
                emit(dict(rec, rank=rank))
    wall = time.perf_counter() - measured_start
    out = {"rank": rank, "world_size": ws, "sharding": a.sharding, "device": device.type,
           "tokens": bpd * accum * a.seq_len * a.steps, "measured_wall_s": wall,
           "steps": steps, "torch": torch.__version__}
    out.update(peak_memory(device))
    d = os.environ.get("FSDPBENCH_METRICS_DIR")
    if d:
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"rank-{rank}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        os.replace(path + ".tmp", path)
    if dist is not None:
        dist.destroy_process_group()
    return 0


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-json", required=True, help="shapes.Shape as JSON, inline or a file path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batch", type=int, help="single-process mode: global batch, samples per step")
    ap.add_argument("--steps", type=int, required=True, help="measured steps")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--out", help="single-process mode: where to write the JSON result")
    ap.add_argument("--sharding", choices=("ddp", "no_shard") + SHARDED,
                    help="distributed mode (under torchrun): the strategy")
    ap.add_argument("--batch-per-device", type=int, default=1)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--mixed-precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    a = ap.parse_args(argv)
    if a.seq_len <= 0 or a.steps <= 0 or not a.lr > 0 or a.weight_decay < 0 or a.seed < 0:
        ap.error("seq-len, steps and lr must be positive; weight-decay and seed not negative")
    try:
        s = load_shape(a.model_json)
    except (OSError, ValueError, KeyError) as e:
        ap.error(f"--model-json: {e}")
    if a.sharding is not None:
        if a.batch_per_device <= 0 or a.grad_accum <= 0 or a.warmup_steps < 0:
            ap.error("batch-per-device and grad-accum must be positive, warmup-steps not negative")
        try:
            return run_distributed(a, s)
        except Infeasible as e:
            print(f"fsdpbench: infeasible: {e}", file=sys.stderr, flush=True)
            return EXIT_INFEASIBLE
        except RuntimeError as e:
            if "out of memory" in str(e):
                print(f"fsdpbench: out of memory: {e}", file=sys.stderr, flush=True)
                return EXIT_OOM
            raise
    if a.batch is None or a.batch <= 0 or a.out is None:
        ap.error("single-process mode needs a positive --batch and --out (or give --sharding)")
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

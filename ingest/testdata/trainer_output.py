#!/usr/bin/env python3
"""Test fixture writer: trains a small Llama-shaped model for real with torch
(DDP on gloo under torchrun) and leaves its output_dir as the Hugging Face
Trainer does, without transformers (Debian has none):

  trainer_state.json   TrainerState.save_to_json: dataclasses.asdict, indent 2,
                       sorted keys; log_history holds one dict per logging step
                       ({loss, grad_norm, learning_rate, epoch, step}; loss is the
                       mean since the last log over all ranks) and a final one
                       with the train metrics
  train_results.json   Trainer.save_metrics("train", metrics): indent 4, sorted
  all_results.json     the same, merged with the other splits' (none here)
  config.json          LlamaConfig.to_json_file of the model trained
  checkpoint-N/        a checkpoint (trainer_state.json only: no run)

The train metrics are transformers' speed_metrics("train", start, num_samples,
num_steps, num_tokens): train_runtime rounded to 4 decimals, *_per_second to 3;
num_samples = max_steps x per-device batch x grad accumulation x world size;
train_tokens_per_second (with --include_tokens_per_second) counts this
process's tokens, per device as TrainingArguments documents it. The model's
shape is fsdpbench's `tiny` preset; the script prints its parameter count.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--output_dir", required=True)
ap.add_argument("--per_device_train_batch_size", type=int, default=4)
ap.add_argument("--gradient_accumulation_steps", type=int, default=1)
ap.add_argument("--max_steps", type=int, default=12)
ap.add_argument("--logging_steps", type=int, default=4)
ap.add_argument("--seq_len", type=int, default=32)
ap.add_argument("--learning_rate", type=float, default=1e-3)
ap.add_argument("--include_tokens_per_second", action="store_true")
a = ap.parse_args()

world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    dist.init_process_group("gloo")
torch.manual_seed(0)

# fsdpbench's tiny preset: hidden 64, 2 layers, 4 heads, 2 kv heads, MLP 128, vocab 256.
H, L, NH, NKV, I, V, THETA, EPS = 64, 2, 4, 2, 128, 256, 10000.0, 1e-5
HD = H // NH


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rope(x, pos):
    inv = 1.0 / (THETA ** (torch.arange(0, HD, 2).float() / HD))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
        self.q_proj = nn.Linear(H, H, bias=False)
        self.k_proj = nn.Linear(H, NKV * HD, bias=False)
        self.v_proj = nn.Linear(H, NKV * HD, bias=False)
        self.o_proj = nn.Linear(H, H, bias=False)
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        pos = torch.arange(t)
        q = rope(self.q_proj(h).view(b, t, NH, HD).transpose(1, 2), pos)
        k = rope(self.k_proj(h).view(b, t, NKV, HD).transpose(1, 2), pos)
        v = self.v_proj(h).view(b, t, NKV, HD).transpose(1, 2)
        k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(b, t, H))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Block() for _ in range(L)])
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(H, V, bias=False)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


model = Llama()
params = sum(p.numel() for p in model.parameters())
non_embedding = params - model.embed_tokens.weight.numel()
if rank == 0:
    print(f"params {params}", flush=True)
ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
opt = torch.optim.AdamW(model.parameters(), lr=a.learning_rate)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / a.max_steps))  # the Trainer's linear default


def mean_over_ranks(x):
    t = torch.tensor([x], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t)
    return t.item() / world


def state(step, log_history, total_flos):
    return {
        "best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
        "epoch": step / a.max_steps, "eval_steps": 500, "global_step": step, "is_hyper_param_search": False,
        "is_local_process_zero": True, "is_world_process_zero": True, "log_history": log_history,
        "logging_steps": a.logging_steps, "max_steps": a.max_steps, "num_input_tokens_seen": 0,
        "num_train_epochs": 1, "save_steps": 500,
        "stateful_callbacks": {"TrainerControl": {"args": {"should_epoch_stop": False, "should_evaluate": False,
                               "should_log": False, "should_save": True, "should_training_stop": True}, "attributes": {}}},
        "total_flos": total_flos, "train_batch_size": a.per_device_train_batch_size, "trial_name": None, "trial_params": None,
    }


gen = torch.Generator().manual_seed(1000 + rank)
tokens_here = a.max_steps * a.gradient_accumulation_steps * a.per_device_train_batch_size * a.seq_len
log_history, tr_loss, total_loss, last_logged, flos = [], 0.0, 0.0, 0, 0.0
start = time.time()
for step in range(1, a.max_steps + 1):
    for micro in range(a.gradient_accumulation_steps):
        ids = torch.randint(0, V, (a.per_device_train_batch_size, a.seq_len + 1), generator=gen)
        logits = ddp(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1)) / a.gradient_accumulation_steps
        loss.backward()
        tr_loss += loss.item()
        flos += 6 * non_embedding * ids[:, :-1].numel()  # Trainer.floating_point_ops
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
    opt.step()
    sched.step()
    opt.zero_grad()
    if step % a.logging_steps == 0:
        interval = mean_over_ranks(tr_loss)
        total_loss += interval
        log_history.append({"epoch": step / a.max_steps, "grad_norm": grad_norm, "learning_rate": sched.get_last_lr()[0],
                            "loss": round(interval / (step - last_logged), 4), "step": step})
        tr_loss, last_logged = 0.0, step
total_loss += mean_over_ranks(tr_loss)
runtime = round(time.time() - start, 4)
total_flos = mean_over_ranks(flos) * world
samples = a.max_steps * a.per_device_train_batch_size * a.gradient_accumulation_steps * world
metrics = {"epoch": 1.0, "total_flos": total_flos, "train_loss": total_loss / a.max_steps, "train_runtime": runtime,
           "train_samples_per_second": round(samples / runtime, 3), "train_steps_per_second": round(a.max_steps / runtime, 3)}
if a.include_tokens_per_second:
    metrics["train_tokens_per_second"] = round(tokens_here / runtime, 3)

if rank == 0:
    out = a.output_dir
    os.makedirs(os.path.join(out, f"checkpoint-{a.max_steps}"), exist_ok=True)

    def dump(path, obj, indent):
        with open(path, "w") as f:
            f.write(json.dumps(obj, indent=indent, sort_keys=True) + "\n")

    dump(os.path.join(out, f"checkpoint-{a.max_steps}", "trainer_state.json"), state(a.max_steps, list(log_history), total_flos), 2)
    log_history.append(dict(metrics, step=a.max_steps))
    dump(os.path.join(out, "trainer_state.json"), state(a.max_steps, log_history, total_flos), 2)
    dump(os.path.join(out, "train_results.json"), metrics, 4)
    dump(os.path.join(out, "all_results.json"), metrics, 4)
    dump(os.path.join(out, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "head_dim": HD, "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02,
        "intermediate_size": I, "max_position_embeddings": 1024, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": NKV, "pretraining_tp": 1,
        "rms_norm_eps": EPS, "rope_scaling": None, "rope_theta": THETA, "tie_word_embeddings": False,
        "torch_dtype": "float32", "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}, 2)
    torch.save(model.state_dict(), os.path.join(out, "pytorch_model.bin"))
    torch.save(vars(a), os.path.join(out, "training_args.bin"))
if world > 1:
    # End at once, as fsdpbench_train.py does: under torch 1.13 with gloo, the
    # process group's teardown (destroy_process_group, or Python's own at exit)
    # can abort a rank ("terminate called without an active exception": a gloo
    # thread still joinable) or hang it. Every file is written and closed above.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

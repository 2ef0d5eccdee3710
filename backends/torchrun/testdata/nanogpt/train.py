# Test fixture (fsdpbench), not nanoGPT's code: a small stand-in for nanoGPT's
# train.py with the same command line and the same output, so fsdpbench's
# nanoGPT path can run in CI where the real repository cannot be fetched.
#
# Like nanoGPT's, it reads configurator.py and data/<dataset>/ relative to the
# directory it runs in; --key=value overrides its globals; under torchrun (RANK
# set) it joins a process group and divides gradient_accumulation_steps (the
# global count) by the world size; it prints "tokens per iteration will be: N"
# (with thousands separators) on every rank, and rank 0 prints
# "step N: train loss X, val loss Y" every eval_interval iterations and
# "iter N: loss X, time Yms, mfu Z%" for iter 0 ... iter max_iters, that is
# max_iters + 1 iterations. One deliberate difference: nanoGPT's DDP path
# always puts a rank on cuda:LOCAL_RANK; this one keeps --device=cpu, so CI can
# run DDP on gloo with Debian's CPU torch.
import math
import os
import pickle
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
eval_interval = 2000
log_interval = 1
eval_iters = 200
eval_only = False
always_save_checkpoint = True
init_from = "scratch"
wandb_log = False
dataset = "openwebtext"
gradient_accumulation_steps = 5 * 8
batch_size = 12
block_size = 1024
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
learning_rate = 6e-4
max_iters = 600000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
warmup_iters = 2000
lr_decay_iters = 600000
min_lr = 6e-5
backend = "nccl"
device = "cuda"
dtype = "float32"
compile = False
exec(open("configurator.py").read())

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend=backend)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
    master_process = rank == 0
    seed_offset = rank
    assert gradient_accumulation_steps % world_size == 0
    gradient_accumulation_steps //= world_size
else:
    master_process, seed_offset, world_size = True, 0, 1
tokens_per_iter = gradient_accumulation_steps * world_size * batch_size * block_size
print(f"tokens per iteration will be: {tokens_per_iter:,}")
if master_process:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)
torch.set_num_threads(1)

data_dir = os.path.join("data", dataset)


def get_batch(split):
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)


vocab_size = 50304
meta_path = os.path.join(data_dir, "meta.pkl")
if os.path.exists(meta_path):
    with open(meta_path, "rb") as f:
        vocab_size = pickle.load(f)["vocab_size"]
    print(f"found vocab_size = {vocab_size} (inside {meta_path})")


class Block(nn.Module):
    """A pre-norm residual MLP: enough to train, small enough for CI."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x))))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def estimate_mfu(self, fwdbwd_per_iter, dt):
        n = sum(p.numel() for p in self.parameters())
        flops = 6 * n * block_size * fwdbwd_per_iter
        return flops / dt / 1e12  # against a nominal 1 TFLOP/s


print("Initializing a new model from scratch")
model = TinyLM().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(beta1, beta2), weight_decay=weight_decay)
if ddp:
    model = DDP(model)
raw_model = model.module if ddp else model


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            x, y = get_batch(split)
            losses[k] = model(x, y)[1].item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / max(lr_decay_iters - warmup_iters, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


iter_num = 0
local_iter_num = 0
running_mfu = -1.0
X, Y = get_batch("train")
t0 = time.time()
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group["lr"] = lr
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num > 0 and always_save_checkpoint:
            print(f"saving checkpoint to {out_dir}")
            torch.save({"model": raw_model.state_dict(), "iter_num": iter_num}, os.path.join(out_dir, "ckpt.pt"))
    if iter_num == 0 and eval_only:
        break
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        _, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        if local_iter_num >= 5:
            mfu = raw_model.estimate_mfu(batch_size * gradient_accumulation_steps, dt)
            running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, mfu {running_mfu * 100:.2f}%")
    iter_num += 1
    local_iter_num += 1
    if iter_num > max_iters:
        break

if ddp:
    destroy_process_group()

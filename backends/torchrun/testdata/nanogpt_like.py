# A stand-in for a nanoGPT-style train.py in its single-process mode, written for
# fsdpbench's launcher tests (not derived from nanoGPT's code): settings are
# module globals that "--key=value" arguments override, a run under torchrun's
# environment (RANK set) takes a DDP path that needs NCCL and CUDA, and every
# iteration prints
#
#     iter N: loss X, time Yms, mfu Z%
#
# with mfu at -100.00% until a few iterations are timed, as nanoGPT's running
# estimate does. The model is a small torch MLP over token embeddings, trained
# with AdamW on seeded random tokens, so losses are real and reproducible.
import json
import os
import sys
import time

import torch

device = "cuda"
max_iters = 10
batch_size = 4
block_size = 32
vocab_size = 64
n_embd = 32
learning_rate = 1e-2
seed = 1337
eval_interval = 5
out_dir = "out"
peak_flops = 1e12  # the "promised" FLOP/s the mfu estimate divides by

# The configurator: --key=value overrides a global of the same type.
print("argv " + json.dumps(sys.argv[1:]), flush=True)
for arg in sys.argv[1:]:
    if not arg.startswith("--") or "=" not in arg:
        sys.exit(f"nanogpt_like: unknown argument {arg!r}; use --key=value")
    key, val = arg[2:].split("=", 1)
    if key not in globals():
        sys.exit(f"nanogpt_like: unknown config key {key!r}")
    old = globals()[key]
    globals()[key] = type(old)(val)
    print(f"Overriding: {key} = {globals()[key]}")

if int(os.environ.get("RANK", -1)) != -1:
    # nanoGPT's DDP path hard-codes these; on a CPU machine it cannot start.
    sys.exit("nanogpt_like: RANK is set, so this is a DDP run: it needs backend nccl and cuda:$LOCAL_RANK")
if device != "cpu" and not torch.cuda.is_available():
    sys.exit(f"nanogpt_like: device {device} is not available; pass --device=cpu")

torch.manual_seed(seed)
torch.set_num_threads(1)
model = torch.nn.Sequential(
    torch.nn.Embedding(vocab_size, n_embd),
    torch.nn.Linear(n_embd, 4 * n_embd),
    torch.nn.GELU(),
    torch.nn.Linear(4 * n_embd, vocab_size),
).to(device)
n_params = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=learning_rate)
# A fixed next-token table makes the loss learnable; the data are seeded.
table = torch.randint(0, vocab_size, (vocab_size,))


def get_batch():
    x = torch.randint(0, vocab_size, (batch_size, block_size))
    return x.to(device), table[x].to(device)


def estimate_mfu(dt):
    flops_per_iter = 6 * n_params * batch_size * block_size
    return flops_per_iter / dt / peak_flops


os.makedirs(out_dir, exist_ok=True)
running_mfu = -1.0
t0 = time.time()
for iter_num in range(max_iters):
    if iter_num % eval_interval == 0:
        with torch.no_grad():
            x, y = get_batch()
            val = torch.nn.functional.cross_entropy(model(x).view(-1, vocab_size), y.view(-1)).item()
        print(f"step {iter_num}: train loss {val:.4f}, val loss {val:.4f}")
        t0 = time.time()
    x, y = get_batch()
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab_size), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num >= 3:
        mfu = estimate_mfu(dt)
        running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
    print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu {running_mfu * 100:.2f}%")

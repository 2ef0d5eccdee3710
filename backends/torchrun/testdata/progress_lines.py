#!/usr/bin/env python3
"""Test fixture: a nanoGPT-style script that only prints progress lines
("iter N: loss X, time Yms, mfu Z%"), with its own flags, under torchrun (DDP on
gloo). It knows nothing of fsdpbench."""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--batch_size", type=int, default=4)
ap.add_argument("--block_size", type=int, default=64)
ap.add_argument("--max_iters", type=int, default=10)
ap.add_argument("--profile", action="store_true",
                help="profile the last 2 iterations into $FSDPBENCH_PROFILE_DIR, as a user's script would")
a = ap.parse_args()
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    dist.init_process_group("gloo")
torch.manual_seed(1337 + rank)
vocab = 256
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 64), torch.nn.Linear(64, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, vocab))
if world > 1:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
prof = None
if a.profile and os.environ.get("FSDPBENCH_PROFILE_DIR"):
    # The path convention: one trace per rank, the rank in its name.
    prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=a.max_iters - 3, warmup=1, active=2, repeat=1),
                                  on_trace_ready=torch.profiler.tensorboard_trace_handler(
                                      os.environ["FSDPBENCH_PROFILE_DIR"], worker_name=f"rank{rank}"))
    prof.start()
t0 = time.time()
for it in range(a.max_iters):
    x = torch.randint(0, vocab, (a.batch_size, a.block_size + 1))
    loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if rank == 0:
        mfu = "" if it < 5 else ", mfu 1.23%"  # nanoGPT prints -100 then an estimate after 5 iters
        print(f"iter {it}: loss {loss.item():.4f}, time {dt*1000:.2f}ms{mfu}", flush=True)
    if prof is not None:
        prof.step()
if prof is not None:
    prof.stop()
if world > 1:
    dist.destroy_process_group()

#!/usr/bin/env python3
"""Test fixture: a script that logs like the Hugging Face Trainer (a dict per
logging step, and a final dict with train_runtime and train_samples_per_second),
training for real under torchrun (DDP on gloo). It knows nothing of fsdpbench."""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--per_device_train_batch_size", type=int, default=4)
ap.add_argument("--max_seq_length", type=int, default=64)
ap.add_argument("--max_steps", type=int, default=10)
ap.add_argument("--logging_steps", type=int, default=2)
a = ap.parse_args()
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    dist.init_process_group("gloo")
torch.manual_seed(0)
vocab = 256
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 64), torch.nn.Linear(64, vocab))
if world > 1:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
start = time.time()
for step in range(1, a.max_steps + 1):
    x = torch.randint(0, vocab, (a.per_device_train_batch_size, a.max_seq_length + 1))
    loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step % a.logging_steps == 0:
        print({"loss": round(loss.item(), 4), "grad_norm": 1.5, "learning_rate": 5e-05, "epoch": step / a.max_steps}, flush=True)
runtime = time.time() - start
samples = a.max_steps * a.per_device_train_batch_size * world
if rank == 0:
    print({"train_runtime": round(runtime, 4), "train_samples_per_second": round(samples / runtime, 3),
           "train_steps_per_second": round(a.max_steps / runtime, 3), "train_loss": 5.5, "epoch": 1.0}, flush=True)
if world > 1:
    dist.destroy_process_group()

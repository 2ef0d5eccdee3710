#!/usr/bin/env python3
"""A training script of the kind teams already have, knowing nothing of fsdpbench:
its own argparse flags, DDP under torchrun, and a metrics.json at the end with the
key names such scripts use (wall_time_s, approx_tokens_per_rank,
approx_tokens_per_s_per_rank, world_size, gpu0, torch, model, dataset, fsdp, bf16).

fsdpbench runs it unchanged through the torchrun backend's argument template
(sweeps/examples/torchrun-user-script.yaml) and files its figures in the same
table as every other backend. It is also the test fixture of that path.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


class TinyLM(torch.nn.Module):
    """Embedding, a few MLP blocks, and an LM head: enough to train on CPU."""

    def __init__(self, vocab, dim, layers):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                torch.nn.Linear(4 * dim, dim)) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.checkpointing = False

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            if self.checkpointing:
                from torch.utils.checkpoint import checkpoint
                h = h + checkpoint(b, h, use_reentrant=False)
            else:
                h = h + b(h)
        return self.head(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model_name", default="tiny-mlp-lm")
    ap.add_argument("--batch_size_per_device", type=int, default=4)
    ap.add_argument("--seq_len", type=int, default=128)
    ap.add_argument("--max_steps", type=int, default=20)
    ap.add_argument("--output_dir", default="outputs")
    ap.add_argument("--gradient_checkpointing", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    vocab = 512
    model = TinyLM(vocab, 64, 2)
    model.checkpointing = args.gradient_checkpointing
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(args.seed + rank)
    start = time.time()
    for step in range(args.max_steps):
        x = torch.randint(0, vocab, (args.batch_size_per_device, args.seq_len + 1), generator=g)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    wall = time.time() - start

    tokens = args.max_steps * args.batch_size_per_device * args.seq_len
    if rank == 0:
        os.makedirs(args.output_dir, exist_ok=True)
        with open(os.path.join(args.output_dir, "metrics.json"), "w") as f:
            json.dump({
                "wall_time_s": wall,
                "approx_tokens_per_rank": tokens,
                "approx_tokens_per_s_per_rank": tokens / wall,
                "world_size": world,
                "gpu0": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                "torch": torch.__version__,
                "model": args.model_name,
                "dataset": "random-tokens",
                "fsdp": False,
                "bf16": args.bf16,
                "final_loss": loss.item(),
            }, f, indent=2)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

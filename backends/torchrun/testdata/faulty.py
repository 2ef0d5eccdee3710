#!/usr/bin/env python3
"""Test fixture: a script under torchrun that ends in one of the ways real runs end
badly (or reports in one of the accepted ways), chosen by --mode."""

import argparse
import faulthandler
import json
import os
import signal
import sys
import time

t0 = time.time()
# A test that finds a rank stuck sends SIGUSR1 and gets its Python stack on stderr.
faulthandler.register(signal.SIGUSR1)
import torch.distributed as dist  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--mode", required=True)
ap.add_argument("--marker", default="")  # lets the test find leftover processes
a = ap.parse_args()
rank = int(os.environ.get("RANK", "0"))
world = int(os.environ.get("WORLD_SIZE", "1"))
if a.mode == "hang":
    print(f"faulty: rank {rank}: torch imported in {time.time() - t0:.1f}s; joining the process group", file=sys.stderr, flush=True)
if world > 1:
    dist.init_process_group("gloo")

if a.mode == "crash":
    if rank == world - 1:
        raise ValueError(f"boom on rank {rank}")
    dist.barrier()  # the other ranks wait for the one that died, as in a collective
elif a.mode == "crash_secondary_first":
    # A survivor's "connection closed by peer" reaches stderr before the exception
    # of the rank that died, as it can under load.
    dist.barrier()
    if rank == 0:
        print("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29411",
              file=sys.stderr, flush=True)
    else:
        time.sleep(1)
        raise ValueError(f"boom on rank {rank}")
    dist.barrier()
elif a.mode == "daemon":
    # A logger or tracker that daemonizes (double fork, setsid) and keeps the rank's
    # stdout and stderr, while the script itself finishes and reports normally.
    if rank == 0:
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print("tracker: syncing in the background", flush=True)
                time.sleep(300)
                os._exit(0)
            os._exit(0)
        os.wait()
        for s in range(1, 4):
            print("FSDPBENCH " + json.dumps({"step": s, "loss": 5.0 - s / 10, "step_time_s": 0.5, "rank": 0}), flush=True)
elif a.mode == "tmpfile":
    # Libraries write scratch files through tempfile; none may land outside the run.
    import tempfile
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(b"scratch")
    if rank == 0:
        for s in range(1, 4):
            print("FSDPBENCH " + json.dumps({"step": s, "loss": 5.0 - s / 10, "step_time_s": 0.5, "rank": 0}), flush=True)
elif a.mode == "oom":
    raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity)")
elif a.mode == "hang":
    # When the step line was written, and where to (a test that misses it compares
    # these wall-clock times with its own and the pipe with the one it reads).
    try:
        out = os.readlink("/proc/self/fd/1")
    except OSError as e:
        out = str(e)
    print("FSDPBENCH " + json.dumps({"step": 1, "loss": 5.0, "step_time_s": 0.1, "rank": rank}), flush=True)
    print(f"faulty: rank {rank}: step line written to {out} at unix {time.time():.3f}", file=sys.stderr, flush=True)
    time.sleep(600)
elif a.mode == "nothing":
    pass
elif a.mode == "badjson":
    if rank == 0:
        with open("metrics.json", "w") as f:
            f.write("{not json")
elif a.mode == "mismatch":
    if rank == 0:
        with open("metrics.json", "w") as f:
            json.dump({"wall_time_s": 2.0, "approx_tokens_per_rank": 1000, "world_size": world + 1}, f)
elif a.mode == "steplines":
    # Step 1's line comes as ranks sharing stdout can write it: print writes the
    # record and its newline apart, and another rank's text lands between them.
    for s in range(1, 4):
        if rank == 0:
            sys.stdout.write("FSDPBENCH " + json.dumps({"step": s, "loss": 5.0 - s / 10, "step_time_s": 0.5, "rank": 0}))
            sys.stdout.flush()
        if s == 1 and world > 1:
            dist.barrier()
            if rank == 1:
                print("rank 1: writing between rank 0's record and its newline", flush=True)
            dist.barrier()
        if rank == 0:
            print(flush=True)
elif a.mode == "diverged":
    # What a run whose loss blows up writes: json.dump's bare NaN, as is.
    steps = [{"step": s, "loss": [2.5, float("inf"), float("nan")][s - 1], "step_time_s": 0.5} for s in range(1, 4)]
    with open(os.path.join(os.environ["FSDPBENCH_METRICS_DIR"], f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": world, "tokens": 48, "measured_wall_s": 1.5, "steps": steps}, f)
    if rank == 0:
        for st in steps:
            print("FSDPBENCH " + json.dumps(dict(st, rank=0)), flush=True)
elif a.mode == "negative":
    if rank == 0:
        for s in range(1, 4):
            print("FSDPBENCH " + json.dumps({"step": s, "loss": 2.0, "step_time_s": -0.5, "rank": 0}), flush=True)
else:
    sys.exit(f"unknown mode {a.mode}")
if world > 1:
    dist.destroy_process_group()

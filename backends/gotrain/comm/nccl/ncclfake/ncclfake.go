// Package ncclfake builds the fake libnccl.so.2 that tests run the NCCL
// communicator against: NCCL's C API over POSIX shared memory on host
// pointers (csrc/fakenccl.cc). Only tests import it; the product never links it.
package ncclfake

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

//go:embed csrc/fakenccl.cc
var source []byte

// Env names the fake's knobs (see csrc/fakenccl.cc).
const (
	// EnvVersion sets the version ncclGetVersion reports, e.g. "21703" for
	// 2.17.3 (before ncclCommSplit).
	EnvVersion = "FSDPBENCH_FAKE_NCCL_VERSION"
	// EnvFault injects a fault: "async:R:K" (the process with RANK=R raises an
	// asynchronous error at its K-th collective), "hang:R:K" (it stops) or
	// "dupgpu" (ncclCommInitRank refuses, as for two ranks on one GPU).
	EnvFault = "FSDPBENCH_FAKE_NCCL_FAULT"
)

// buildTimeout bounds the g++ run.
const buildTimeout = 2 * time.Minute

// Build compiles the fake into dir/libnccl.so.2 with g++ and returns its path.
// A missing g++ is an error: the NCCL code path is then untested.
func Build(dir string) (string, error) {
	src := filepath.Join(dir, "fakenccl.cc")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "libnccl.so.2")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "g++", "-std=c++17", "-O2", "-g", "-Wall", "-Wextra", "-Werror",
		"-shared", "-fPIC", "-o", out, src, "-lrt")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("ncclfake: build with g++ (apt install g++): %w\n%s", err, b)
	}
	return out, nil
}

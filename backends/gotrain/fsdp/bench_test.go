package fsdp

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// BenchmarkStep is one optimizer step on one rank, and reports tokens/s: tiny
// under full_shard (seq 16, batch 4), and issue 16's model
// (sweeps/examples/models/llama-h256-l4) under DDP at seq 128, batch 4, and the
// larger llama-h512-l8 at seq 256, the steps cpu-engines-h256.yaml and
// cpu-engines-h512.yaml time at world size 1 (optimizer included). OpenBLAS gets
// GOMAXPROCS threads, as in a worker, so -cpu 1,2 shows how a step scales over
// cores; -cpuprofile shows where it goes.
func BenchmarkStep(b *testing.B) {
	h256, err := shapes.ReadConfig("../../../sweeps/examples/models/llama-h256-l4/config.json")
	require.NoError(b, err)
	h512, err := shapes.ReadConfig("../../../sweeps/examples/models/llama-h512-l8/config.json")
	require.NoError(b, err)
	tiny := baseConfig(b)
	tiny.Sharding = sweeps.FullShard
	issue := Config{Shape: h256, Sharding: sweeps.DDP, BatchPerDevice: 4, SeqLen: 128, Seed: 7, LR: 1e-3, WeightDecay: 0.01}
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"tiny-full_shard", tiny}, {"llama-h256-l4-ddp", issue},
		{"llama-h512-l8-ddp", Config{Shape: h512, Sharding: sweeps.DDP, BatchPerDevice: 4, SeqLen: 256, Seed: 7, LR: 1e-3, WeightDecay: 0.01}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if lib, err := openblas.Load(); err == nil { // as a worker does: -cpu 1,2 shows the scaling
				require.NoError(b, lib.SetThreads(runtime.GOMAXPROCS(0)))
			}
			world := newWorld(b, 1)
			tr, err := New(context.Background(), cpu.New(cpu.Options{}), world[0], bc.cfg)
			require.NoError(b, err)
			defer tr.Close()
			tokens := 0
			for b.Loop() {
				rep, err := tr.Step(context.Background())
				require.NoError(b, err)
				tokens += rep.Tokens
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

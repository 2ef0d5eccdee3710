package fsdp

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// BenchmarkStep is one full_shard optimizer step of tiny on one rank (seq 16,
// batch 4); it reports tokens/s.
func BenchmarkStep(b *testing.B) {
	cfg := baseConfig(b)
	cfg.Sharding = sweeps.FullShard
	world := newWorld(b, 1)
	tr, err := New(context.Background(), cpu.New(cpu.Options{}), world[0], cfg)
	require.NoError(b, err)
	defer tr.Close()
	tokens := 0
	for b.Loop() {
		rep, err := tr.Step(context.Background())
		require.NoError(b, err)
		tokens += rep.Tokens
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}

package sweeps

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// spec1M is a 10-axis grid of 1,000,000 points: 5^6 × 4 × 4 × 2 × 2.
const spec1M = `name: million
hardware: h100-sxm
grid:
  model: [tiny, gpt2-124m, llama-1b, llama3-8b, mistral-7b]
  world_size: [1, 2, 4, 8, 16]
  batch_per_device: [1, 2, 4, 8, 16]
  seq_len: [128, 256, 512, 1024, 2048]
  seed: [0, 1, 2, 3, 4]
  wrap_policy: [transformer, size:1M, size:10M, size:100M, size:1B]
  sharding: [full_shard, shard_grad_op, no_shard, ddp]
  grad_accum: [1, 2, 4, 8]
  activation_checkpointing: [false, true]
  cpu_offload: [false, true]
`

// BenchmarkExpand1M parses and expands a 1,000,000-point grid, IDs included.
func BenchmarkExpand1M(b *testing.B) {
	data := []byte(spec1M)
	b.ReportAllocs()
	for b.Loop() {
		plan, err := Parse(data, "million.yaml", Options{})
		require.NoError(b, err)
		require.Equal(b, 1_000_000, len(plan.Runs))
	}
}

// BenchmarkParseExample is the cost of an ordinary spec.
func BenchmarkParseExample(b *testing.B) {
	data := []byte(setSpec)
	b.ReportAllocs()
	for b.Loop() {
		_, err := Parse(data, "spec.yaml", Options{Set: []string{"seq_len=1024", "sharding=full_shard,no_shard"}})
		require.NoError(b, err)
	}
}

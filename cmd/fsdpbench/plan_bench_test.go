package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planGrid is a sim spec whose grid has the given values per axis: the last
// axes (seed, wrap_policy) set the size.
func planGrid(seeds, wraps string) string {
	return `name: million
backend: sim
hardware: h100-sxm
grid:
  model: [tiny, gpt2-124m, llama-1b, llama3-8b, mistral-7b]
  world_size: [1, 2, 4, 8, 16]
  batch_per_device: [1, 2, 4, 8, 16]
  seq_len: [128, 256, 512, 1024, 2048]
  seed: [` + seeds + `]
  wrap_policy: [` + wraps + `]
  sharding: [full_shard, shard_grad_op, no_shard, ddp]
  grad_accum: [1, 2, 4, 8]
  activation_checkpointing: [false, true]
  cpu_offload: [false, true]
`
}

// BenchmarkPlan1M plans a 1,000,000-point grid (the summary, not a row per
// run). Issue 39 asks for at most 5 s and 300 MB on a 2-core machine. It took
// 42 s and 1.1 GB of RSS (`fsdpbench plan` of this spec, /usr/bin/time -v)
// while the plan held every RunConfig (440 bytes each, plus their strings) and
// predicted each run three times; streamed (sweeps.Options.Stream: one pass,
// holding none of the runs) and predicting each point the sim reads once
// (sim.Memo: the five seeds share one prediction), with the size policies'
// module trees built once per model (unitsFor), it takes about 3.5 s and
// 110 MB. (The test binary's own RSS is not the figure: its TestMain builds
// the binary, and time -v reports the largest process.) BenchmarkPlan40K is
// the same spec cut to 40,000 points, for profiling (-cpuprofile, -memprofile).
func BenchmarkPlan1M(b *testing.B) {
	benchPlan(b, planGrid("0, 1, 2, 3, 4", "transformer, size:1M, size:10M, size:100M, size:1B"))
}

func BenchmarkPlan40K(b *testing.B) { benchPlan(b, planGrid("0", "transformer")) }

func benchPlan(b *testing.B, spec string) {
	path := filepath.Join(b.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		root := newRootCmd()
		root.SetArgs([]string{"plan", path})
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(io.Discard)
		if err := root.ExecuteContext(context.Background()); err != nil {
			b.Fatal(err)
		}
		if !strings.Contains(out.String(), "nothing was run") {
			b.Fatal(out.String())
		}
	}
}

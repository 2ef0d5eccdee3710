package torchrun

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// runConfig is tiny at global batch 4 on ws ranks: batch_per_device 4/ws, so every
// world size trains on the same samples.
func runConfig(ws int, sharding string) sweeps.RunConfig {
	return sweeps.RunConfig{Backend: Name, Hardware: "cpu", Model: "tiny", SeqLen: 16, Steps: 3, WarmupSteps: 1,
		Seed: 7, Nodes: 1, GPUsPerNode: ws, WorldSize: ws, BatchPerDevice: 4 / ws, GradAccum: 1, GlobalBatch: 4,
		Sharding: sharding, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.FP32}
}

// goLosses trains rc's model with the Go trainer in-process on one rank at the same
// global batch and returns the losses of every step, warmup included.
func goLosses(t *testing.T, rc sweeps.RunConfig, o Options) []float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	shape, err := shapes.Lookup(rc.Model)
	require.NoError(t, err)
	cfg := fsdp.Config{Shape: shape, Sharding: sweeps.NoShard, BatchPerDevice: rc.GlobalBatch, SeqLen: rc.SeqLen,
		Seed: uint64(rc.Seed), LR: o.LR, WeightDecay: o.WeightDecay}
	tr, err := fsdp.New(ctx, cpu.New(cpu.Options{}), oneRankWorld(ctx, t), cfg)
	require.NoError(t, err)
	defer tr.Close()
	var losses []float64
	for range rc.WarmupSteps + rc.Steps {
		rep, err := tr.Step(ctx)
		require.NoError(t, err)
		losses = append(losses, rep.Loss)
	}
	return losses
}

// TestRunMatchesGoTrainer runs the backend under real torchrun (DDP over gloo) at
// world sizes 1 and 2 and requires the Go trainer's loss at every measured step,
// and every reported figure.
func TestRunMatchesGoTrainer(t *testing.T) {
	needTorch(t)
	opts, err := ParseOptions(nil)
	require.NoError(t, err)
	want := goLosses(t, runConfig(1, sweeps.DDP), opts)
	b := New()
	for _, ws := range []int{1, 2} {
		t.Run(fmt.Sprintf("ws%d", ws), func(t *testing.T) {
			rc := runConfig(ws, sweeps.DDP)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			require.NoError(t, b.Validate(ctx, rc))
			var stepEvents int
			var stderr strings.Builder
			res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &stderr}, func(e backends.Event) {
				if e.Kind == backends.EventStep {
					stepEvents++
				}
			})
			require.NoError(t, err)
			require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr.String())
			require.Len(t, res.Steps, rc.Steps)
			assert.Equal(t, rc.Steps, stepEvents)
			for i, st := range res.Steps {
				require.NotNil(t, st.Loss)
				g := want[rc.WarmupSteps+i]
				assert.InDelta(t, 0, math.Abs(*st.Loss-g)/g, 1e-4, "step %d: torch %.7f, go %.7f", i+1, *st.Loss, g)
				assert.Positive(t, st.StepTimeS)
				assert.Equal(t, rc.TokensPerStep(), st.Tokens)
			}
			require.Len(t, res.PerRank, ws)
			var tokens int64
			for _, r := range res.PerRank {
				tokens += r.Tokens
				require.NotNil(t, r.PeakRSSBytes)
				assert.Positive(t, *r.PeakRSSBytes)
				assert.LessOrEqual(t, r.MeasuredWallS, res.MeasuredWallS)
			}
			assert.Equal(t, rc.TokensPerStep()*int64(rc.Steps), tokens, "the ranks' tokens must add up to the global batch's")
			shape, err := shapes.Lookup(rc.Model)
			require.NoError(t, err)
			assert.Equal(t, shape.FlopsPerToken(rc.SeqLen), res.ModelFlopsPerToken)
			assert.Positive(t, res.PeakFlopsPerS)
			assert.NotEmpty(t, res.Env.Torch)
		})
	}
}

// TestValidateRefusesWhatCPUTorchCannotRun covers the infeasible combinations.
func TestValidateRefusesWhatCPUTorchCannotRun(t *testing.T) {
	needTorch(t)
	b := New()
	info, err := b.torch(context.Background(), DefaultPython)
	require.NoError(t, err)
	tests := []struct {
		name string
		edit func(*sweeps.RunConfig)
		want string
	}{
		{"full_shard on cpu", func(rc *sweeps.RunConfig) { rc.Sharding = sweeps.FullShard }, "cannot run FSDP"},
		{"bf16", func(rc *sweeps.RunConfig) { rc.MixedPrecision = sweeps.BF16 }, "fp32 on CPU"},
		{"offload with ddp", func(rc *sweeps.RunConfig) { rc.CPUOffload = true }, "offload needs a sharded strategy"},
		{"unknown option", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"nope": 1} }, "backend_options.nope: unknown key"},
		{"two nodes", func(rc *sweeps.RunConfig) { rc.Nodes, rc.GPUsPerNode = 2, 1 }, "use launcher: slurm"},
		{"bad template", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"args": "--bs {batch_per_devce}"} },
			"did you mean {batch_per_device}"},
		{"missing script", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"script": "/nonexistent/train.py"} },
			"backend_options.script"},
		{"gpt2 on the built-in model", func(rc *sweeps.RunConfig) { rc.Model = "gpt2-124m" }, "model_impl: transformers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := runConfig(2, sweeps.DDP)
			tc.edit(&rc)
			err := b.Validate(context.Background(), rc)
			if (tc.name == "full_shard on cpu" || tc.name == "bf16") && info.CUDA {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// stepScript prints one FSDPBENCH step line per step from rank 0 and writes no
// rank file, as a script that reports through the torchrun backend's step lines
// alone does; a line of another rank is progress, not a figure.
const stepScript = `
for i in $(seq 1 "$1"); do
  echo "FSDPBENCH {\"step\": $i, \"loss\": 2.5, \"step_time_s\": 0.25, \"rank\": 0}"
  echo "FSDPBENCH {\"step\": $i, \"loss\": 2.5, \"step_time_s\": 9, \"rank\": 1}"
done
`

func execRC(t *testing.T, steps string) sweeps.RunConfig {
	script := filepath.Join(t.TempDir(), "steps.sh")
	require.NoError(t, os.WriteFile(script, []byte(stepScript), 0o755))
	return sweeps.RunConfig{Backend: "exec", Hardware: "cpu", Model: "tiny", SeqLen: 16, Steps: 4, WarmupSteps: 0,
		Nodes: 1, GPUsPerNode: 2, WorldSize: 2, BatchPerDevice: 2, GradAccum: 1, GlobalBatch: 4,
		Sharding: sweeps.DDP, MixedPrecision: sweeps.FP32, ID: "r1",
		BackendOptions: map[string]any{"command": []any{"sh", script, steps}}}
}

// TestStepLinesAlone runs a command that prints step lines and writes no rank
// file: the run is measured from rank 0's lines (before, it failed for want of
// ranks/rank-0.json), and more lines than measured steps fail it saying so.
func TestStepLinesAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := execRC(t, "{steps}")
	require.NoError(t, backend{}.Validate(ctx, rc))
	res, err := backend{}.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir()}, func(backends.Event) {})
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status, res.Error)
	require.Len(t, res.Steps, rc.Steps)
	for i, st := range res.Steps {
		assert.Equal(t, i+1, st.Step)
		assert.InDelta(t, 0.25, st.StepTimeS, 1e-12, "rank 0's step time, not rank 1's")
		assert.Equal(t, rc.TokensPerStep(), st.Tokens)
	}
	assert.InDelta(t, 0.25*float64(rc.Steps), res.MeasuredWallS, 1e-9)

	rc = execRC(t, "9")
	res, err = backend{}.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir()}, func(backends.Event) {})
	require.NoError(t, err)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "printed 9 FSDPBENCH step lines from rank 0 but the run measures 4 steps")
	assert.True(t, strings.HasPrefix(res.Error, "exec: "), res.Error)
}

// TestStepLinesRepeatedOrOutsideTheWorld (issue 39, item 4): step 1 printed
// five times, or steps of rank 99 in a world of 2, were good steps; without
// rank files the run now fails with the broken line, saying why.
func TestStepLinesRepeatedOrOutsideTheWorld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ script, want string }{
		{`for i in 1 2 3 4 5; do echo 'FSDPBENCH {"step": 1, "loss": 2.5, "step_time_s": 0.25}'; done`,
			"rank 0 reported step 1 twice: each measured step is reported once"},
		{`for i in 1 2 3 4; do echo "FSDPBENCH {\"step\": $i, \"step_time_s\": 0.25, \"rank\": 0}"; echo "FSDPBENCH {\"step\": $i, \"step_time_s\": 0.25, \"rank\": 99}"; done`,
			"rank is 99 but the run has 2 ranks (ranks 0 to 1)"},
	} {
		rc := execRC(t, "{steps}")
		script := filepath.Join(t.TempDir(), "bad.sh")
		require.NoError(t, os.WriteFile(script, []byte(tc.script), 0o755))
		rc.BackendOptions = map[string]any{"command": []any{"sh", script}}
		res, err := backend{}.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir()}, func(backends.Event) {})
		require.NoError(t, err)
		assert.Equal(t, results.StatusFailed, res.Status)
		assert.Contains(t, res.Error, "exec: the command wrote no rank files and printed a broken FSDPBENCH line: step line: "+tc.want)
	}
}

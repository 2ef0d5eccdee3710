package sweeps

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckpointAxis: the checkpoint axis expands, fills checkpoint_every, gives
// every kind its own ID, and leaves the ID of a run without checkpointing as it
// was before the axis existed.
func TestCheckpointAxis(t *testing.T) {
	plain := parse(t, "name: x\nsteps: 10\nbase: {world_size: 2}\n").Runs[0]
	plan := parse(t, "name: x\nsteps: 10\nbase: {world_size: 2}\ngrid:\n  checkpoint: [none, sharded, full]\n  resume_check: [false, true]\nexclude:\n  - {checkpoint: none, resume_check: true}\n")
	require.Len(t, plan.Runs, 5)
	ids := map[string]bool{}
	for _, rc := range plan.Runs {
		ids[rc.ID] = true
		if rc.Checkpoint == CheckpointNone {
			assert.Equal(t, plain.ID, rc.ID, "a run without checkpointing keeps its old ID")
			assert.Equal(t, plain.Fingerprint(), rc.Fingerprint())
			assert.Zero(t, rc.CheckpointEvery)
			continue
		}
		assert.Equal(t, 5, rc.CheckpointEvery, "default: the middle of the measured steps")
		assert.Contains(t, rc.Slug, "-ck_"+rc.Checkpoint)
	}
	assert.Len(t, ids, 5, "every point has its own ID")
	assert.Equal(t, []string{"checkpoint", "resume_check", "checkpoint_every"}, plan.Axes, "checkpoint_every is 0 without checkpointing")

	every := parse(t, "name: x\nsteps: 10\nbase: {checkpoint: full}\ngrid:\n  checkpoint_every: [2, 5]\n").Runs
	require.Len(t, every, 2)
	assert.NotEqual(t, every[0].ID, every[1].ID, "checkpoint_every enters the ID")
}

func TestCheckpointErrors(t *testing.T) {
	tests := []struct {
		name, spec, want string
		line, col        int
	}{
		{"unknown kind", "name: x\ngrid:\n  checkpoint: [sharded, ful]\n",
			`unknown checkpoint "ful" (allowed: none, sharded, full; did you mean full?)`, 3, 25},
		{"every past steps", "name: x\nsteps: 4\nbase: {checkpoint: sharded, checkpoint_every: 9}\n",
			"checkpoint_every 9 is more than the 4 measured steps", 3, 47},
		{"every out of bounds", "name: x\nbase: {checkpoint: sharded, checkpoint_every: 0}\n",
			"checkpoint_every must be a positive integer (at most 1000000), got 0", 2, 47},
		{"resume without checkpoint", "name: x\nbase: {resume_check: true}\n",
			"resume_check needs a checkpoint to resume from, but checkpoint is none", 2, 22},
		{"resume with nothing after the save", "name: x\nsteps: 4\nbase: {checkpoint: full, checkpoint_every: 4, resume_check: true}\n",
			"no step would follow it", 3, 44},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := specError(t, tt.spec, Options{})
			assert.Contains(t, se.Error(), tt.want)
			assert.Equal(t, tt.line, se.Line, se.Error())
			assert.Equal(t, tt.col, se.Column, se.Error())
		})
	}
}

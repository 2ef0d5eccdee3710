package results

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// ckptRun is a run of the fixture that checkpointed: rank r wrote perRank[r]
// bytes, each repeat saved in saveS[i] seconds and resumed exactly or not.
func ckptRun(t *testing.T, kind string, perRank []int64, saveS []float64, exact []bool) Run {
	t.Helper()
	rc := fixtureConfig(len(perRank), sweeps.FullShard)
	rc.Checkpoint, rc.CheckpointEvery, rc.ResumeCheck = kind, 2, true
	rc.AssignID()
	var reps []Result
	for i := range saveS {
		r := fixtureResult(rc)
		r.CheckpointSaveS, r.CheckpointLoadS, r.ResumeExact = F64(saveS[i]), F64(saveS[i]/2), &exact[i]
		for rank, b := range perRank {
			r.PerRank = append(r.PerRank, RankResult{Rank: rank, CheckpointBytes: I64(b)})
		}
		reps = append(reps, r)
	}
	return Run{Config: rc, Metrics: Normalize(rc, reps)}
}

func TestNormalizeCheckpoint(t *testing.T) {
	tests := []struct {
		name           string
		perRank        []int64
		saveS          []float64
		exact          []bool
		total, largest int64
		save           float64
		wantExact      bool
	}{
		{"sharded, one repeat", []int64{100, 100}, []float64{0.5}, []bool{true}, 200, 100, 0.5, true},
		{"full on rank 0", []int64{300, 0, 0, 0}, []float64{0.5}, []bool{true}, 300, 300, 0.5, true},
		{"one inexact repeat of three", []int64{10}, []float64{0.3, 0.1, 0.2}, []bool{true, false, true}, 10, 10, 0.2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ckptRun(t, sweeps.CheckpointSharded, tt.perRank, tt.saveS, tt.exact)
			m := r.Metrics
			require.NoError(t, CheckMetrics(&r.Config, &m))
			assert.Equal(t, tt.total, *m.CheckpointBytes)
			assert.Equal(t, tt.largest, *m.CheckpointBytesPerRank)
			assert.InDelta(t, tt.save, *m.CheckpointSaveS, 1e-12)
			assert.InDelta(t, tt.save/2, *m.CheckpointLoadS, 1e-12)
			assert.Equal(t, tt.wantExact, *m.ResumeExact)
			col, err := LookupColumn("resume_exact")
			require.NoError(t, err)
			assert.Equal(t, map[bool]int64{true: 1, false: 0}[tt.wantExact], col.Value(&r))
		})
	}
}

func TestCheckCheckpointBounds(t *testing.T) {
	tests := []struct {
		name, field string
		edit        func(m *Metrics)
	}{
		{"negative save", "checkpoint_save_s", func(m *Metrics) { m.CheckpointSaveS = F64(-1) }},
		{"load past a day", "checkpoint_load_s", func(m *Metrics) { m.CheckpointLoadS = F64(MaxCheckpointS + 1) }},
		{"zero bytes", "checkpoint_bytes", func(m *Metrics) { m.CheckpointBytes = I64(0) }},
		{"rank above total", "checkpoint_bytes_per_rank", func(m *Metrics) { m.CheckpointBytesPerRank = I64(1 << 40) }},
		{"median disagrees with samples", "checkpoint_save_s", func(m *Metrics) { m.CheckpointSaveS = F64(9) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ckptRun(t, sweeps.CheckpointFull, []int64{100, 100}, []float64{0.1, 0.2, 0.3}, []bool{true, true, true})
			tt.edit(&r.Metrics)
			err := CheckMetrics(&r.Config, &r.Metrics)
			var ie *InvalidRunError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tt.field, ie.Field, err.Error())
		})
	}
}

// TestGateHoldsCheckpointFigures: a gate rule can hold the save time (relative)
// and exact resume (absolute).
func TestGateHoldsCheckpointFigures(t *testing.T) {
	base := []Run{ckptRun(t, sweeps.CheckpointSharded, []int64{100, 100}, []float64{0.5}, []bool{true})}
	slow := []Run{ckptRun(t, sweeps.CheckpointSharded, []int64{100, 100}, []float64{0.8}, []bool{false})}
	rules, err := ParseRules([]string{"checkpoint_save_s:+10%", "resume_exact>=1", "checkpoint_bytes:+0%"}, "--rule")
	require.NoError(t, err)
	g, err := Gate(base, base, GateOptions{Rules: rules})
	require.NoError(t, err)
	assert.True(t, g.Passed, "%+v", g.Problems)
	g, err = Gate(base, slow, GateOptions{Rules: rules})
	require.NoError(t, err)
	assert.False(t, g.Passed)
	assert.Equal(t, 2, g.Failures, "the slower save and the inexact resume fail; the bytes did not change")
}

package results

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// workloadRun is a finished run of rc at tokens/s given by speed (the
// fixture's step time divided by it).
func workloadRun(rc sweeps.RunConfig, speed float64) Run {
	res := fixtureResult(rc)
	for i := range res.Steps {
		res.Steps[i].StepTimeS /= speed
	}
	res.MeasuredWallS /= speed
	return Run{Config: rc, Metrics: Normalize(rc, []Result{res})}
}

// nanoGPTStoredBefore is nanoGPT's run (a user script under launcher:
// python, model: tiny as a label) as stored before issue 37: under the ID of
// the Go trainer's built-in tiny at the same point.
func nanoGPTStoredBefore() (gotrain, nano sweeps.RunConfig) {
	gotrain = fixtureConfig(1, sweeps.DDP)
	nano = gotrain
	nano.Sweep, nano.Backend = "nanogpt-cpu", "torchrun"
	nano.BackendOptions = map[string]any{"launcher": "python", "script": "/home/u/nanoGPT/train.py"}
	nano.SpecPaths = map[string]any{"backend_options.script": "../../nanoGPT/train.py"}
	nano.ID, _ = nano.OldWorkloadID()
	return gotrain, nano
}

// TestComparePairedRunsThatDiffer is issue 37 §2: compare paired nanoGPT's
// runs with the Go trainer's built-in tiny (one ID, stored before IDs hashed
// the script) and printed +409.82% with no word that the scripts differ. It
// still pairs them (their IDs match), and says per row what differs.
func TestComparePairedRunsThatDiffer(t *testing.T) {
	gotrain, nano := nanoGPTStoredBefore()
	require.Equal(t, gotrain.ID, nano.ID)
	cmp, err := Compare([]Run{workloadRun(nano, 1)}, []Run{workloadRun(gotrain, 5.1)},
		CompareOptions{Metrics: []string{"tokens_per_s_per_rank"}, BaselineName: "nanogpt-cpu", CurrentName: "calibrate-cpu"})
	require.NoError(t, err)
	require.Len(t, cmp.Rows, 1)
	want := []string{`backend: "torchrun" vs "gotrain"`, `backend_options.launcher: "python" vs none`,
		`backend_options.script: "../../nanoGPT/train.py" vs none`}
	assert.Equal(t, want, cmp.Rows[0].Differs)
	var buf bytes.Buffer
	require.NoError(t, cmp.Write(&buf, FormatTable))
	out := buf.String()
	assert.Contains(t, out, "% ¹ ≠", "the change is marked")
	assert.Contains(t, out, "≠ "+gotrain.ID+`: the paired runs differ in backend: "torchrun" vs "gotrain"; backend_options.launcher: "python" vs none; backend_options.script: "../../nanoGPT/train.py" vs none`)

	// Runs of the same workload pair without a word.
	same, err := Compare([]Run{workloadRun(gotrain, 1)}, []Run{workloadRun(gotrain, 1.1)}, CompareOptions{Metrics: []string{"tokens_per_s_per_rank"}})
	require.NoError(t, err)
	assert.Empty(t, same.Rows[0].Differs)
	buf.Reset()
	require.NoError(t, same.Write(&buf, FormatTable))
	assert.NotContains(t, buf.String(), "≠")
}

// TestGatePairedRunsThatDiffer: each check of a pair that differs in what it
// runs says so in its reason (tables, markdown, JUnit) and in Differs (JSON).
func TestGatePairedRunsThatDiffer(t *testing.T) {
	gotrain, nano := nanoGPTStoredBefore()
	g, err := Gate([]Run{workloadRun(nano, 1)}, []Run{workloadRun(gotrain, 1)}, GateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, g.Checks)
	for _, c := range g.Checks {
		assert.Contains(t, c.Reason, `; ≠ the paired runs differ in backend: "torchrun" vs "gotrain"`, c.Rule.String())
		assert.Len(t, c.Differs, 3)
	}
	assert.Empty(t, g.Renamed, "one stored ID on both sides: paired, not renamed")
}

// TestGateOldBaselineIDsChanged: a gate whose baseline was stored before run
// IDs hashed the workload, against current results measured after, says the
// IDs changed (old → new) instead of reporting the runs missing and new.
func TestGateOldBaselineIDsChanged(t *testing.T) {
	_, before := nanoGPTStoredBefore()
	now := before
	now.InputHashes = map[string]string{"backend_options.script": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	now.AssignID()
	require.NotEqual(t, before.ID, now.ID)
	builtin := fixtureConfig(2, sweeps.FullShard) // a run whose ID did not change

	g, err := Gate([]Run{workloadRun(before, 1), workloadRun(builtin, 1)}, []Run{workloadRun(now, 1), workloadRun(builtin, 1)}, GateOptions{})
	require.NoError(t, err)
	assert.Empty(t, g.Missing)
	assert.Empty(t, g.New)
	assert.Equal(t, []string{before.ID + " → " + now.ID}, g.Renamed)
	assert.True(t, g.Passed, "the run of the built-in model compared and passed; the renamed one is skipped, saying why: %v", g.Problems)
	for _, c := range g.Checks {
		if c.Run == builtin.ID {
			continue
		}
		assert.Equal(t, OutcomeSkip, c.Outcome)
		assert.Contains(t, c.Reason, "run IDs changed in "+sweeps.WorkloadIDChange+" for runs with a user script, command or model file: "+before.ID+" is "+now.ID+" now")
	}
	var buf bytes.Buffer
	require.NoError(t, g.Write(&buf, FormatTable))
	assert.Contains(t, buf.String(), "Run IDs changed in "+sweeps.WorkloadIDChange+" for runs with a user script, command or model file:\n- "+before.ID+" → "+now.ID)
	assert.NotContains(t, buf.String(), "missing: in the baseline")

	// Compare says it too.
	cmp, err := Compare([]Run{workloadRun(before, 1)}, []Run{workloadRun(now, 1)}, CompareOptions{Metrics: []string{"tokens_per_s_per_rank"}})
	require.NoError(t, err)
	assert.Equal(t, g.Renamed, cmp.Renamed)
	buf.Reset()
	require.NoError(t, cmp.Write(&buf, FormatTable))
	assert.Contains(t, buf.String(), "run IDs changed in "+sweeps.WorkloadIDChange)

	// A baseline of the new scheme missing a run is missing, as ever.
	g, err = Gate([]Run{workloadRun(now, 1), workloadRun(builtin, 1)}, []Run{workloadRun(builtin, 1)}, GateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{now.ID}, g.Missing)
	assert.Empty(t, g.Renamed)
}

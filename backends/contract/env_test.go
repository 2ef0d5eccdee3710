package contract

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestWithEnv: the spec's variables replace inherited entries of the same name
// and come last, sorted; the rest of the environment is kept in order.
func TestWithEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "NCCL_ALGO=Tree", "HOME=/h", "NOEQUALS"}
	got := WithEnv(environ, map[string]string{"NCCL_ALGO": "Ring", "A_B": "x=y"})
	assert.Equal(t, []string{"PATH=/bin", "HOME=/h", "NOEQUALS", "A_B=x=y", "NCCL_ALGO=Ring"}, got)
	assert.Equal(t, []string{"PATH=/bin", "NCCL_ALGO=Tree", "HOME=/h", "NOEQUALS"}, environ, "environ untouched")
	assert.Equal(t, environ, WithEnv(environ, nil))
	assert.Equal(t, map[string]string{"X": "got", "Y": ""}, Received(map[string]string{"X": "a", "Y": "b"},
		func(k string) string { return map[string]string{"X": "got"}[k] }))
}

// TestReadRanksChecksTheSpecEnv: a rank that recorded another value of a
// spec variable (or none) fails the run's collection with both values; one
// that recorded them right, or recorded none, passes.
func TestReadRanksChecksTheSpecEnv(t *testing.T) {
	rc := sweeps.RunConfig{WorldSize: 1, Steps: 1, GlobalBatch: 1, SeqLen: 8, Env: map[string]string{"NCCL_ALGO": "Ring"}}
	steps := `"steps": [{"step": 1, "step_time_s": 0.5}]`
	for body, want := range map[string]string{
		`{"rank": 0, "spec_env": {"NCCL_ALGO": "Ring"}, ` + steps + `}`: "",
		`{"rank": 0, ` + steps + `}`:                                    "",
		`{"rank": 0, "spec_env": {"NCCL_ALGO": "Tree"}, ` + steps + `}`: `spec_env: the rank's process had NCCL_ALGO="Tree", but the spec gives "Ring"`,
		`{"rank": 0, "spec_env": {"NCCL_ALGO": null}, ` + steps + `}`:   `spec_env: the rank's process had NCCL_ALGO="", but the spec gives "Ring"`,
	} {
		dir := t.TempDir()
		writeRank(t, dir, 0, body)
		var res results.Result
		err := ReadRanks(&res, rc, dir, "test")
		if want == "" {
			assert.NoError(t, err, body)
		} else if assert.Error(t, err, body) {
			assert.Contains(t, err.Error(), want)
		}
	}
}

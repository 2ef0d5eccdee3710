package results

import (
	"bytes"
	"encoding/csv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestEnvColumns: env.NAME and varied backend_options.NAME are axis columns:
// found by name, added to the CSV after the registry's, and listed among the
// varying axes; an env column is empty for a run without the variable.
func TestEnvColumns(t *testing.T) {
	runs := []Run{
		{Config: sweeps.RunConfig{ID: "a", Env: map[string]string{"NCCL_ALGO": "Ring"}, BackendOptions: map[string]any{"transport": "shm"}, OptionAxes: []string{"transport"}}},
		{Config: sweeps.RunConfig{ID: "b", Env: map[string]string{"NCCL_ALGO": "Tree"}, BackendOptions: map[string]any{"transport": "tcp"}, OptionAxes: []string{"transport"}}},
		{Config: sweeps.RunConfig{ID: "c", BackendOptions: map[string]any{"transport": "tcp", "lr": 0.1}, OptionAxes: []string{"transport"}}},
	}
	c, err := LookupColumn("env.NCCL_ALGO", KindAxis)
	require.NoError(t, err)
	assert.Equal(t, "Ring", c.Value(&runs[0]))
	assert.Nil(t, c.Value(&runs[2]))
	c, err = LookupColumn("backend_options.transport")
	require.NoError(t, err)
	assert.Equal(t, "tcp", c.Value(&runs[1]))
	gpu, err := LookupColumn("env.gpu")
	require.NoError(t, err)
	assert.Equal(t, KindMetric, gpu.Kind, "the registry's env.gpu stays itself")
	_, err = LookupColumn("env.NCCL_ALGO", KindMetric)
	assert.Error(t, err, "an env column is an axis, not a metric")

	var b bytes.Buffer
	require.NoError(t, WriteCSV(&b, runs))
	recs, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	n := len(Columns())
	assert.Equal(t, []string{"backend_options.transport", "env.NCCL_ALGO"}, recs[0][n:])
	assert.Equal(t, []string{"tcp", ""}, recs[3][n:])

	var names []string
	for _, a := range newAxisSet(runs).varying() {
		names = append(names, a.col.Name)
	}
	assert.Contains(t, names, "env.NCCL_ALGO")
	assert.Contains(t, names, "backend_options.transport")
}

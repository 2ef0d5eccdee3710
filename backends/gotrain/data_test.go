package gotrain

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
)

// TestDataOption (issue 37 item 9): backend_options.data picks the synthetic
// data set: random (the default, so runs without the option keep their IDs
// and figures) or repeat; anything else is refused with the choices.
func TestDataOption(t *testing.T) {
	o, err := ParseOptions(nil)
	require.NoError(t, err)
	assert.Empty(t, o.Data, "random, as model.BatchOf reads it")
	for _, kind := range model.DataKinds {
		o, err := ParseOptions(map[string]any{"data": kind})
		require.NoError(t, err)
		assert.Equal(t, kind, o.Data)
	}
	for _, bad := range []any{"copy", 1, nil} {
		_, err := ParseOptions(map[string]any{"data": bad})
		require.Error(t, err, "%v", bad)
		assert.Contains(t, err.Error(), "backend_options.data: must be one of [random repeat]")
	}
	_, err = ParseOptions(map[string]any{"dta": "repeat"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "data", "the misspelt key suggests data")
}

package sweeps

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptionPositions: a plan says where each backend and launcher option was
// given, so a backend's complaint about one can point at the spec line.
func TestOptionPositions(t *testing.T) {
	spec := "name: p\nbackend: sim\nbackend_options:\n  efficiency: 0.5\n  x: 1\nlauncher_options:\n  partition: gpu\n"
	plan, err := Parse([]byte(spec), "p.yaml", Options{Set: []string{"backend_options.y=2"}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"backend_options.efficiency": "p.yaml:4:3",
		"backend_options.x":          "p.yaml:5:3",
		"backend_options.y":          "--set #1 column 1",
		"launcher_options.partition": "p.yaml:7:3",
	}, plan.OptionPos)
}

package shapes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExampleModels reads the config.json files the cpu-engines example specs
// train on both engines, and pins the shapes their headers state.
func TestExampleModels(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want Shape
	}{
		{"llama-h256-l4", Shape{Hidden: 256, Layers: 4, Heads: 4, KVHeads: 2, Intermediate: 704, Vocab: 4096}},
		{"llama-h512-l8", Shape{Hidden: 512, Layers: 8, Heads: 8, KVHeads: 4, Intermediate: 1408, Vocab: 4096}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			s, err := ReadConfig("../../sweeps/examples/models/" + tc.dir + "/config.json")
			require.NoError(t, err)
			assert.Equal(t, tc.dir, s.Name, "named after its directory")
			assert.Equal(t, ArchLlama, s.Arch)
			assert.Equal(t, [6]int{tc.want.Hidden, tc.want.Layers, tc.want.Heads, tc.want.KVHeads, tc.want.Intermediate, tc.want.Vocab},
				[6]int{s.Hidden, s.Layers, s.Heads, s.KVHeads, s.Intermediate, s.Vocab})
			assert.False(t, s.TiedEmbeddings, "untied head")
			assert.Equal(t, 64, s.HeadDim())
		})
	}
}

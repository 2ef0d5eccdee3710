package sim

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

func mustShape(t testing.TB, name string) shapes.Shape {
	t.Helper()
	s, err := shapes.Lookup(name)
	require.NoError(t, err)
	return s
}

func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

func TestModuleTreeCountsEveryParameter(t *testing.T) {
	for _, name := range shapes.Presets() {
		s := mustShape(t, name)
		assert.Equal(t, s.Params(), moduleTree(s).total(), name)
	}
}

func TestTransformerWrap(t *testing.T) {
	for _, name := range shapes.Presets() {
		s := mustShape(t, name)
		w, err := moduleTree(s).units(WrapTransformer)
		require.NoError(t, err)
		require.Len(t, w.Units, s.Layers)
		for _, u := range w.Units {
			assert.Equal(t, s.BlockParams(), u)
		}
		assert.Equal(t, s.Params()-int64(s.Layers)*s.BlockParams(), w.Root, "root: embeddings, final norm, head")
		assert.Equal(t, s.BlockParams(), w.MaxUnit())
		direct, err := unitsFor(s, WrapTransformer)
		require.NoError(t, err)
		assert.Equal(t, w, direct, "the shortcut agrees with walking the tree")
	}
}

func TestSizeWrapFollowsPyTorch(t *testing.T) {
	s := mustShape(t, "llama3-8b")
	h, in, kv, v := int64(s.Hidden), int64(s.Intermediate), int64(s.KVDim()), int64(s.Vocab)
	attn := 2*h*h + 2*h*kv
	mlp := 3 * h * in
	w, err := moduleTree(s).units("size:100000000")
	require.NoError(t, err)
	// A decoder layer (218M) is recursed into; its attention (42M) is too small to
	// wrap, its MLP (176M) is wrapped whole (no single Linear reaches 100M), and the
	// layer's remainder (attention + norms) stays unwrapped. The layers' ModuleList
	// is never wrapped, so the model body wraps everything the layers left (all
	// attention, 1.3B) in one unit; the embedding and the head are units of their own.
	require.Less(t, attn, int64(100_000_000))
	var want []int64
	for range s.Layers {
		want = append(want, mlp)
	}
	want = append(want, v*h, int64(s.Layers)*(attn+2*h)+h, v*h)
	slices.Sort(want)
	got := slices.Clone(w.Units)
	slices.Sort(got)
	assert.Equal(t, want, got)
	assert.Zero(t, w.Root)
	assert.Equal(t, int64(s.Layers)*(attn+2*h)+h, w.MaxUnit())
}

func TestSizeWrapExtremes(t *testing.T) {
	s := mustShape(t, "gpt2-124m")
	tree := moduleTree(s)
	// Larger than the model: nothing is wrapped, the root holds everything.
	w, err := tree.units("size:1000000000")
	require.NoError(t, err)
	assert.Empty(t, w.Units)
	assert.Equal(t, s.Params(), w.Root)
	// One parameter: every module with parameters of its own is a unit.
	w, err = tree.units("size:1")
	require.NoError(t, err)
	assert.Zero(t, w.Root)
	assert.Equal(t, s.Params(), sum(w.Units))
	assert.Equal(t, int64(s.Vocab*s.Hidden), w.MaxUnit(), "the tied embedding is the largest leaf")
	// Whatever the policy, the units and the root partition the parameters.
	for _, p := range []string{"size:1000", "size:1000000", "size:10000000", "size:50000000"} {
		w, err := tree.units(p)
		require.NoError(t, err)
		assert.Equal(t, s.Params(), w.Root+sum(w.Units), p)
	}
}

func TestParseWrapPolicy(t *testing.T) {
	for _, bad := range []string{"size:", "size:-3", "size:1e8", "block", "size:abc"} {
		_, _, err := parseWrapPolicy(bad)
		assert.ErrorContains(t, err, "want transformer or size:<min params>", bad)
	}
	n, tr, err := parseWrapPolicy("size:100000000")
	require.NoError(t, err)
	assert.False(t, tr)
	assert.Equal(t, int64(100_000_000), n)
	_, tr, err = parseWrapPolicy("")
	require.NoError(t, err)
	assert.True(t, tr, "transformer is the default")
}

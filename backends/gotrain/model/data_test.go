package model

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepeatBatch: data: repeat is a sequence of distinct tokens repeated, so
// every token has one next token; a sample depends only on its global index;
// random stays the default.
func TestRepeatBatch(t *testing.T) {
	const seed, seq, vocab = 9, 40, 256
	pattern := RepeatPattern(seed, vocab)
	require.Len(t, pattern, RepeatPeriod)
	seen := map[int32]bool{}
	for _, tok := range pattern {
		require.True(t, tok >= 0 && tok < vocab)
		require.False(t, seen[tok], "distinct tokens: %v", pattern)
		seen[tok] = true
	}
	in, tg, err := RepeatBatch(seed, 0, 6, seq, vocab)
	require.NoError(t, err)
	next := map[int32]int32{}
	for i := range pattern {
		next[pattern[i]] = pattern[(i+1)%len(pattern)]
	}
	starts := map[int32]bool{}
	for s := range 6 {
		assert.Equal(t, in[s*seq+1:(s+1)*seq], tg[s*seq:(s+1)*seq-1], "targets are the inputs shifted by one")
		starts[in[s*seq]] = true
		for j := range seq {
			require.Equal(t, next[in[s*seq+j]], tg[s*seq+j], "sample %d position %d follows the pattern", s, j)
		}
	}
	assert.Greater(t, len(starts), 1, "samples start at their own offsets")
	in2, _, err := RepeatBatch(seed, 3, 3, seq, vocab)
	require.NoError(t, err)
	assert.Equal(t, in[3*seq:], in2, "a sample depends only on its global index")

	// Pinned: the reference script computes the same tokens
	// (fsdpbench_train.py's repeat_tokens, TestScriptRepeatDataMatchesGo),
	// and runs on data: repeat are compared across versions.
	assert.Equal(t, []int32{213, 157, 88, 144}, pattern[:4])
	assert.Equal(t, []int32{254, 3, 99, 112}, in[:4])

	small := RepeatPattern(seed, 5)
	assert.Len(t, small, 5, "a vocabulary under the period repeats all of it")
	one, _, err := RepeatBatch(seed, 0, 1, 4, 1)
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 0, 0, 0}, one)

	for kind, want := range map[string]func(uint64, int, int, int, int) ([]int32, []int32, error){
		"": Batch, DataRandom: Batch, DataRepeat: RepeatBatch} {
		a, _, err := BatchOf(kind, seed, 0, 2, seq, vocab)
		require.NoError(t, err)
		b, _, err := want(seed, 0, 2, seq, vocab)
		require.NoError(t, err)
		assert.True(t, slices.Equal(a, b), kind)
	}
	_, _, err = BatchOf("copy", seed, 0, 2, seq, vocab)
	assert.ErrorContains(t, err, `data "copy" is none of [random repeat]`)
	for _, bad := range [][4]int{{-1, 1, 8, 8}, {0, -1, 8, 8}, {0, 1, 0, 8}, {0, 1, 8, 0}} {
		_, _, err := RepeatBatch(seed, bad[0], bad[1], bad[2], bad[3])
		assert.Error(t, err, "RepeatBatch%v", bad)
	}
}

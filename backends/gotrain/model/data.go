package model

import "fmt"

// Synthetic data sets: what backend_options.data chooses (gotrain's, and the
// torchrun project script's --data, which computes the same tokens).
const (
	// DataRandom is uniformly random tokens (Batch): the default, which no
	// model can predict, so the loss stays near ln(vocab) however long it
	// trains. It measures speed and memory, not learning.
	DataRandom = "random"
	// DataRepeat is a short sequence of distinct tokens repeated (RepeatBatch):
	// each token is followed by the same next token everywhere, so a model
	// learns it within tens of steps and the loss falls towards 0, showing
	// that training works. Speed and memory are those of random data.
	DataRepeat = "repeat"
)

// DataKinds are the synthetic data sets, DataRandom first (the default).
var DataKinds = []string{DataRandom, DataRepeat}

// RepeatPeriod is the length of DataRepeat's repeated sequence (less in a
// vocabulary smaller than it): long enough that the task is a lookup table of
// RepeatPeriod entries rather than a constant, short enough for a two-layer
// model to learn in tens of steps.
const RepeatPeriod = 32

// BatchOf is the batch of data set kind ("" is DataRandom): Batch or
// RepeatBatch.
func BatchOf(kind string, seed uint64, firstSample, n, seqLen, vocab int) (inputs, targets []int32, err error) {
	switch kind {
	case "", DataRandom:
		return Batch(seed, firstSample, n, seqLen, vocab)
	case DataRepeat:
		return RepeatBatch(seed, firstSample, n, seqLen, vocab)
	}
	return nil, nil, fmt.Errorf("synthetic batch: data %q is none of %v", kind, DataKinds)
}

// RepeatPattern is DataRepeat's repeated sequence: min(vocab, RepeatPeriod)
// distinct tokens, the first distinct values of splitmix64(seed ^
// fnv1a64("data/repeat"), j) mod vocab for j = 0, 1, 2, ... (a value already
// taken is skipped), so that a reference script reproduces it.
func RepeatPattern(seed uint64, vocab int) []int32 {
	period := min(vocab, RepeatPeriod)
	key := seed ^ fnv1a64("data/repeat")
	seen := make(map[int32]bool, period)
	pattern := make([]int32, 0, period)
	for j := uint64(0); len(pattern) < period; j++ {
		tok := int32(splitmix64(key, j) % uint64(vocab))
		if !seen[tok] {
			seen[tok] = true
			pattern = append(pattern, tok)
		}
	}
	return pattern
}

// RepeatBatch returns n samples of DataRepeat from global sample firstSample,
// laid out as Batch's: sample i is seqLen+1 consecutive tokens of the
// repeated RepeatPattern, starting at its offset splitmix64(seed ^
// fnv1a64("data/repeat/offset"), i) mod period; the inputs are the first
// seqLen, the targets the last seqLen. Like Batch, a sample depends only on
// (seed, i), so a global batch is the same however it is split.
func RepeatBatch(seed uint64, firstSample, n, seqLen, vocab int) (inputs, targets []int32, err error) {
	if firstSample < 0 || n < 0 || seqLen <= 0 || vocab <= 0 {
		return nil, nil, fmt.Errorf("synthetic batch: first sample %d and count %d must not be negative, seq_len %d and vocab %d must be positive",
			firstSample, n, seqLen, vocab)
	}
	pattern := RepeatPattern(seed, vocab)
	period := uint64(len(pattern))
	offsetKey := seed ^ fnv1a64("data/repeat/offset")
	inputs, targets = make([]int32, n*seqLen), make([]int32, n*seqLen)
	for s := range n {
		at := splitmix64(offsetKey, uint64(firstSample+s)) % period
		for j := range seqLen {
			inputs[s*seqLen+j] = pattern[(at+uint64(j))%period]
			targets[s*seqLen+j] = pattern[(at+uint64(j)+1)%period]
		}
	}
	return inputs, targets, nil
}

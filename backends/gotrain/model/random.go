package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"sync"
)

// Random numbers for initialization and data, defined so that any language with
// 64-bit unsigned integers and IEEE doubles reproduces them (a PyTorch reference
// script in Python: ints masked to 64 bits, math.log/cos/sqrt):
//
//	splitmix64(state, j) = mix(state + (j+1)·0x9E3779B97F4A7C15)   (mod 2⁶⁴)
//	mix(z): z = (z ^ z>>30)·0xBF58476D1CE4E5B9; z = (z ^ z>>27)·0x94D049BB133111EB; z ^ z>>31
//
// which is the (j+1)-th output of Vigna's SplitMix64 generator seeded with state,
// computable for any j without the ones before it. FNV-1a (64-bit) hashes names.
// A normal value uses two outputs and Box–Muller:
//
//	u1 = ((splitmix64(key, 2j) >> 11) + 1)·2⁻⁵³        in (0, 1]
//	u2 =  (splitmix64(key, 2j+1) >> 11)·2⁻⁵³           in [0, 1)
//	normal(key, j) = sqrt(−2·ln u1)·cos(2π·u2)
//
// A tensor element j is float32(std·normal(seed ^ fnv1a64(name), j)), rounded once
// to nearest. Go's math.Log and math.Cos may differ from C's libm in the last bit
// of a double; the float32 rounding hides that but for about 1 element in 2²⁹.

const golden = 0x9E3779B97F4A7C15

// splitmix64 returns output j (0-based) of SplitMix64 seeded with state.
func splitmix64(state, j uint64) uint64 {
	z := state + (j+1)*golden
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fnv1a64 is the 64-bit FNV-1a hash of s.
func fnv1a64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s)) // a hash.Hash never returns an error
	return h.Sum64()
}

// normal returns standard normal value j of the stream keyed by key.
func normal(key, j uint64) float64 {
	u1 := float64(splitmix64(key, 2*j)>>11+1) * 0x1p-53
	u2 := float64(splitmix64(key, 2*j+1)>>11) * 0x1p-53
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// Init writes the initial values of elements [offset, offset+len(dst)) of the
// unit's flat buffer into dst; elements past Size (FSDP's padding) are 0. Every
// element depends only on (seed, tensor name, index in the tensor), so each rank
// initializes its own shard and the model is the same at every world size:
// InitNormal tensors get float32(Std·normal(seed ^ fnv1a64(Name), j)) (see the
// package's random.go for the generator), InitOnes tensors 1.
func (u Unit) Init(seed uint64, offset int, dst []float32) error {
	if offset < 0 {
		return fmt.Errorf("init unit %s: negative offset %d", u.Name, offset)
	}
	clear(dst)
	for _, t := range u.Tensors {
		lo, hi := max(t.Offset, offset), min(t.Offset+t.Size, offset+len(dst))
		if lo >= hi {
			continue
		}
		out := dst[lo-offset : hi-offset]
		if t.Init == InitOnes {
			for i := range out {
				out[i] = 1
			}
			continue
		}
		key, first := seed^fnv1a64(t.Name), uint64(lo-t.Offset)
		fill(len(out), func(from, to int) {
			for i := from; i < to; i++ {
				out[i] = float32(t.Std * normal(key, first+uint64(i)))
			}
		})
	}
	return nil
}

// fill splits [0, n) over GOMAXPROCS goroutines for large n (a 7B model's block
// is 200M values, seconds of Box–Muller).
func fill(n int, fn func(from, to int)) {
	const minChunk = 1 << 16
	workers := min(runtime.GOMAXPROCS(0), n/minChunk)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for from := 0; from < n; from += chunk {
		wg.Go(func() { fn(from, min(from+chunk, n)) })
	}
	wg.Wait()
}

// Batch returns the synthetic tokens of n samples starting at global sample index
// firstSample, each seqLen inputs and the seqLen targets shifted by one, laid out
// [n, seqLen]. Sample i is seqLen+1 tokens, token j = splitmix64(state_i, j) mod
// vocab with state_i = splitmix64(seed ^ fnv1a64("data"), i): every sample depends
// only on (seed, i), so a global batch is the same however it is split over ranks
// and micro-batches. (The modulo's bias is below vocab/2⁶⁴.)
func Batch(seed uint64, firstSample, n, seqLen, vocab int) (inputs, targets []int32, err error) {
	if firstSample < 0 || n < 0 || seqLen <= 0 || vocab <= 0 {
		return nil, nil, fmt.Errorf("synthetic batch: first sample %d and count %d must not be negative, seq_len %d and vocab %d must be positive",
			firstSample, n, seqLen, vocab)
	}
	dataKey := seed ^ fnv1a64("data")
	inputs, targets = make([]int32, n*seqLen), make([]int32, n*seqLen)
	for s := range n {
		state := splitmix64(dataKey, uint64(firstSample+s))
		prev := int32(splitmix64(state, 0) % uint64(vocab))
		for j := range seqLen {
			tok := int32(splitmix64(state, uint64(j+1)) % uint64(vocab))
			inputs[s*seqLen+j], targets[s*seqLen+j] = prev, tok
			prev = tok
		}
	}
	return inputs, targets, nil
}

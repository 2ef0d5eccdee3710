package cpu

import (
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// TestParallelForWorkers: a loop splits into at most min(GOMAXPROCS, the
// SetWorkers cap) contiguous chunks that cover [0, n) once, and a small loop
// does not split.
func TestParallelForWorkers(t *testing.T) {
	defer SetWorkers(0)
	procs := runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name          string
		cap, n, cost  int
		wantMaxChunks int
	}{
		{"default", 0, 1000, 1000, procs},
		{"capped at one", 1, 1000, 1000, 1},
		{"cap above GOMAXPROCS", procs + 3, 1000, 1000, procs},
		{"too little work", 0, 10, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			SetWorkers(tc.cap)
			var mu sync.Mutex
			var chunks [][2]int
			seen := make([]int, tc.n)
			parallelFor(tc.n, tc.cost, func(lo, hi int) {
				mu.Lock()
				defer mu.Unlock()
				chunks = append(chunks, [2]int{lo, hi})
				for i := lo; i < hi; i++ {
					seen[i]++
				}
			})
			assert.LessOrEqual(t, len(chunks), tc.wantMaxChunks)
			for i, c := range seen {
				assert.Equal(t, 1, c, "item %d", i)
			}
		})
	}
}

// TestOpsDoNotDependOnWorkers: the ops that split their loops, RMSNorm's
// backward among them (which fuses its dw pass on one worker), give the same
// bits on one worker as on three.
func TestOpsDoNotDependOnWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	defer SetWorkers(0)
	const rows, dim = 64, 256
	vals := func(n, seed int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32((i*seed+7)%23)/11 - 1
		}
		return s
	}
	run := func(workers int) [][]float32 {
		SetWorkers(workers)
		d := New(Options{})
		buf := func(n, seed int) device.Buffer {
			b, err := d.Alloc(n, device.Other)
			require.NoError(t, err)
			d.CopyFromHost(b, vals(n, seed))
			return b
		}
		x, w, dy, dx, dw, out, rstd := buf(rows*dim, 3), buf(dim, 5), buf(rows*dim, 7), buf(rows*dim, 9), buf(dim, 11), buf(rows*dim, 1), buf(rows, 1)
		d.RMSNormForward(out, rstd, x, w, rows, dim, 1e-5)
		d.RMSNormBackward(dx, dw, dy, x, w, rstd, rows, dim)
		sg, dg, du := buf(rows*dim, 13), buf(rows*dim, 17), buf(rows*dim, 19)
		d.SwiGLUForward(sg, x, dy)
		d.SwiGLUBackward(dg, du, out, x, dy)
		targets := make([]int32, rows)
		for i := range targets {
			targets[i] = int32(i * 5 % dim)
		}
		losses, dz := buf(rows, 1), buf(rows*dim, 1)
		d.CrossEntropyForward(losses, x, targets, dim)
		d.CrossEntropyBackward(dz, x, targets, dim, 0.5)
		m, v := buf(rows*dim, 29), buf(rows*dim, 31)
		d.AdamW(dx, dy, m, v, device.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 3})
		var got [][]float32
		for _, b := range []device.Buffer{out, rstd, dx, dw, sg, dg, du, losses, dz, m, v} {
			h := make([]float32, b.Len())
			d.CopyToHost(h, b)
			got = append(got, h)
		}
		return got
	}
	one, three := run(1), run(3)
	for i := range one {
		for j := range one[i] {
			if math.Float32bits(one[i][j]) != math.Float32bits(three[i][j]) {
				t.Fatalf("output %d element %d: %v on one worker, %v on three", i, j, one[i][j], three[i][j])
			}
		}
	}
}

package cpu

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
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

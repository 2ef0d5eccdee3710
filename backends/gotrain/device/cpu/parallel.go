package cpu

import (
	"runtime"
	"sync"
)

// minParallelWork is the work (items × cost per item, roughly floating-point
// operations) below which a loop runs on the calling goroutine: starting goroutines
// costs about a microsecond, some thousands of operations.
const minParallelWork = 1 << 15

// parallelFor calls fn over [0, n) split into contiguous chunks, one per
// GOMAXPROCS worker, when the work is large enough to pay for it. fn must only
// write outputs owned by its items, so the result does not depend on the split.
func parallelFor(n, costPerItem int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || n*costPerItem < minParallelWork {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}

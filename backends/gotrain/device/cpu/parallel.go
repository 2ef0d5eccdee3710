package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// maxWorkers caps the goroutines an op splits over; 0 leaves GOMAXPROCS.
var maxWorkers atomic.Int32

// SetWorkers caps the goroutines the ops of this process's cpu devices split
// their loops over at n (0 or less: GOMAXPROCS, the default): a rank's share of
// the host's cores, as OpenBLAS's thread count is. It is process-wide, as a
// rank is a process. GOMAXPROCS itself stays Go's default, so the goroutines
// of collectives get a processor while a GEMM holds one in C.
func SetWorkers(n int) { maxWorkers.Store(int32(max(n, 0))) }

// minParallelWork is the work (items × cost per item, roughly floating-point
// operations) below which a loop runs on the calling goroutine: starting goroutines
// costs about a microsecond, some thousands of operations.
const minParallelWork = 1 << 15

// parallelFor calls fn over [0, n) split into contiguous chunks, one per
// worker (GOMAXPROCS, capped by SetWorkers), when the work is large enough to pay for it. fn must only
// write outputs owned by its items, so the result does not depend on the split.
func parallelFor(n, costPerItem int, fn func(lo, hi int)) {
	workers := workersFor(n, costPerItem)
	if workers <= 1 {
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

// workersFor is the number of chunks parallelFor splits n items of costPerItem
// over: 1 when the work is too small to pay for goroutines.
func workersFor(n, costPerItem int) int {
	workers := runtime.GOMAXPROCS(0)
	if w := int(maxWorkers.Load()); w > 0 {
		workers = min(workers, w)
	}
	workers = min(workers, n)
	if workers <= 1 || n*costPerItem < minParallelWork {
		return 1
	}
	return workers
}

// serial reports whether parallelFor(n, costPerItem, …) runs on the calling
// goroutine as one chunk, so an op may fuse passes that would otherwise split
// differently.
func serial(n, costPerItem int) bool { return workersFor(n, costPerItem) == 1 }

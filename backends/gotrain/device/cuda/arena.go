package cuda

import (
	"errors"
	"fmt"
	"sort"
)

// The arena is a caching allocator in the manner of PyTorch's CUDACachingAllocator,
// simplified to one stream: device memory is taken from the driver in segments
// (cuMemAlloc) and handed out in blocks cut from them; a freed block goes back to
// the arena, not to the driver, and is merged with free neighbours. Segments are
// returned to the driver only when an allocation would otherwise fail, and at
// Close. The arena does not know categories: the tracker charges those, exactly
// as the cpu device does, and the arena reports what it holds beyond them.
const (
	// blockAlign rounds every block, and so aligns every block start: cuBLAS and
	// vectorized kernels want 256-byte alignment; 512 is PyTorch's rounding.
	blockAlign = 512
	// smallSize and its segment: requests up to 1 MiB share 2 MiB segments.
	smallSize    = 1 << 20
	smallSegment = 2 << 20
	// mediumSize and its segment: requests under 10 MiB share 20 MiB segments.
	mediumSize    = 10 << 20
	mediumSegment = 20 << 20
	// largeRound rounds larger requests into a segment of their own.
	largeRound = 2 << 20
)

// errDriverOOM is what a segment allocator returns when the driver is out of memory.
var errDriverOOM = errors.New("the driver has no memory left for another segment")

// segmentAllocator gets and returns device memory; the real one calls
// cuMemAlloc/cuMemFree, the tests' one counts.
type segmentAllocator interface {
	allocSegment(bytes int64) (uint64, error)
	freeSegment(ptr uint64) error
}

type segment struct {
	base uint64
	size int64
	// blocks tile the segment in address order.
	blocks []*block
}

type block struct {
	seg  *segment
	off  int64
	size int64
	used bool
}

// ArenaStats is what the arena holds, in bytes.
type ArenaStats struct {
	// Reserved is the memory taken from the driver (segments); PeakReserved its peak.
	Reserved     int64 `json:"reserved_bytes"`
	PeakReserved int64 `json:"peak_reserved_bytes"`
	// InBlocks is the memory of blocks in use, rounding included.
	InBlocks int64 `json:"in_blocks_bytes"`
	// Segments is the number of segments.
	Segments int `json:"segments"`
}

type arena struct {
	sa       segmentAllocator
	segs     []*segment
	live     map[uint64]*block
	stats    ArenaStats
	released int64 // segments given back to the driver on memory pressure
}

func newArena(sa segmentAllocator) *arena {
	return &arena{sa: sa, live: map[uint64]*block{}}
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// segmentSize is the size of a new segment for a request of n (rounded) bytes.
func segmentSize(n int64) int64 {
	switch {
	case n <= smallSize:
		return smallSegment
	case n < mediumSize:
		return mediumSegment
	}
	return roundUp(n, largeRound)
}

// alloc returns the address of a block of at least bytes (> 0) bytes.
func (a *arena) alloc(bytes int64) (uint64, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("arena: allocate %d bytes", bytes)
	}
	n := roundUp(bytes, blockAlign)
	b := a.bestFit(n)
	if b == nil {
		size := segmentSize(n)
		ptr, err := a.sa.allocSegment(size)
		if errors.Is(err, errDriverOOM) && a.releaseEmpty() > 0 {
			ptr, err = a.sa.allocSegment(size)
		}
		if err != nil {
			return 0, err
		}
		s := &segment{base: ptr, size: size}
		b = &block{seg: s, size: size}
		s.blocks = []*block{b}
		a.segs = append(a.segs, s)
		a.stats.Reserved += size
		a.stats.PeakReserved = max(a.stats.PeakReserved, a.stats.Reserved)
		a.stats.Segments = len(a.segs)
	}
	a.split(b, n)
	b.used = true
	a.stats.InBlocks += b.size
	ptr := b.seg.base + uint64(b.off)
	a.live[ptr] = b
	return ptr, nil
}

// bestFit is the smallest free block of at least n bytes, the lowest address
// among equals, so the arena's layout does not depend on map order.
func (a *arena) bestFit(n int64) *block {
	var best *block
	for _, s := range a.segs {
		for _, b := range s.blocks {
			if b.used || b.size < n {
				continue
			}
			if best == nil || b.size < best.size {
				best = b
			}
		}
	}
	return best
}

// split cuts b to n bytes when the rest is worth a block of its own.
func (a *arena) split(b *block, n int64) {
	if b.size-n < blockAlign {
		return
	}
	rest := &block{seg: b.seg, off: b.off + n, size: b.size - n}
	b.size = n
	s := b.seg
	i := sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].off > b.off })
	s.blocks = append(s.blocks, nil)
	copy(s.blocks[i+1:], s.blocks[i:])
	s.blocks[i] = rest
}

// free returns the block at ptr to the arena and merges it with free neighbours.
func (a *arena) free(ptr uint64) error {
	b, ok := a.live[ptr]
	if !ok {
		return fmt.Errorf("arena: free of %#x, which is not a live block", ptr)
	}
	delete(a.live, ptr)
	b.used = false
	a.stats.InBlocks -= b.size
	s := b.seg
	merged := s.blocks[:0]
	for _, x := range s.blocks {
		if n := len(merged); n > 0 && !x.used && !merged[n-1].used {
			merged[n-1].size += x.size
			continue
		}
		merged = append(merged, x)
	}
	clear(s.blocks[len(merged):])
	s.blocks = merged
	return nil
}

// releaseEmpty gives every segment without a block in use back to the driver and
// returns the bytes released.
func (a *arena) releaseEmpty() int64 {
	var freed int64
	kept := a.segs[:0]
	for _, s := range a.segs {
		if len(s.blocks) == 1 && !s.blocks[0].used && a.sa.freeSegment(s.base) == nil {
			freed += s.size
			continue
		}
		kept = append(kept, s)
	}
	clear(a.segs[len(kept):])
	a.segs = kept
	a.stats.Reserved -= freed
	a.stats.Segments = len(a.segs)
	a.released += freed
	return freed
}

// close frees every segment, used or not; the arena is empty afterwards.
func (a *arena) close() error {
	var errs []error
	for _, s := range a.segs {
		errs = append(errs, a.sa.freeSegment(s.base))
	}
	a.segs, a.live = nil, map[uint64]*block{}
	a.stats.Reserved, a.stats.InBlocks, a.stats.Segments = 0, 0, 0
	return errors.Join(errs...)
}

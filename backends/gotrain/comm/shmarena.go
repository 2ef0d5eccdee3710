package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"golang.org/x/sys/unix"
)

// Shared gathered buffers. A copying all-gather on shared memory moves every byte
// through memcpy about twice per rank (into the segment, out of it), which on a
// 2-core machine stays below the loopback TCP copy. FSDP needs no copy at all: a
// unit's gathered parameters are read-only between their all-gather and their
// free, and every rank allocates and frees them in the same order, so the ranks of
// a node can hold ONE physical gathered buffer. The all-gather into it is
//
//  1. an enter barrier: every rank is in this all-gather, so every rank has
//     allocated the buffer, so every rank has freed (is done reading) whatever
//     that memory held before;
//  2. each rank writes only its own piece;
//  3. an exit barrier: every piece is written.
//
// The arena is a part of the group's segment. Each rank runs its own copy of one
// deterministic allocator over it (first fit, in the order of the calls), so ranks
// that allocate and free alike get the same offsets; the all-gather carries the
// offset in its round headers, and a rank whose buffer is elsewhere (allocators
// that diverged, a bug) fails the collective on every rank as out of step instead
// of writing into a buffer a peer still reads. When the arena is full, AllocShared
// says so and the caller uses a private buffer and the copying all-gather.

// SharedGatherer is implemented by communicators whose ranks can share one physical
// gathered buffer (the shared-memory communicator). Callers must allocate, gather
// into and free shared buffers in the same order on every rank of the group, and
// must not write into a shared buffer outside AllGatherShared.
type SharedGatherer interface {
	// AllocShared returns n float32 of memory shared by the group's ranks, at
	// the same place on every rank that allocates in the same order; ok is false
	// when the arena has no room (use a private buffer then: the same on every
	// rank, whose allocators agree). The memory is not zeroed: it may still be
	// read by a peer until the first AllGatherShared into it.
	AllocShared(n int) (buf []float32, ok bool)
	// FreeShared returns a buffer of AllocShared once this rank is done reading it.
	FreeShared(buf []float32)
	// AllGatherShared fills the shared buffer dst (len n×Size) in place: after
	// the enter barrier, fill writes this rank's piece dst[rank×n:(rank+1)×n],
	// and the exit barrier waits for every rank's piece. dt is what the elements
	// hold, for the byte counts (a bf16 all-gather moves 2 bytes an element, as
	// the copying one does).
	//
	// A nil fill is the in-place all-gather of a persistent buffer: every rank
	// wrote its piece before the call, so one barrier is all there is (no byte
	// moves); the caller guarantees that no peer still reads the memory of a
	// piece when its owner writes it (see fsdp's zero-copy gathers). All ranks
	// must pass a nil fill alike: the round's header says which, and a mix fails
	// as out of step.
	AllGatherShared(ctx context.Context, dst []float32, n int, dt device.DType, fill func(piece []float32)) error
	// AgreeShared is a collective: it returns true on every rank when every rank
	// passes ok and holds bufs (buffers of AllocShared) at the same arena offsets
	// and lengths, false on every rank when some rank passes !ok, and an error
	// when all are ok but their buffers differ (allocators that diverged: a bug).
	// It lets the ranks decide together whether buffers they allocated (where a
	// rank's allocation can fail alone, e.g. a full tmpfs) can be used. It counts
	// as a barrier (no bus bytes).
	AgreeShared(ctx context.Context, ok bool, bufs [][]float32) (bool, error)
}

var _ SharedGatherer = (*shm)(nil)

// Arena sizes.
const (
	// DefaultShmArenaBytes is Options.ShmArenaBytes when 0: address space only
	// until buffers are handed out, and room for the gathered units in flight of
	// models far larger than a cpu run trains.
	DefaultShmArenaBytes = 1 << 30
	// maxArenaBytes bounds Options.ShmArenaBytes.
	maxArenaBytes = 1 << 36
	// arenaAlign is the alignment of shared buffers: a cache line.
	arenaAlign = 64
	// inPlaceTag marks an in-place AllGatherShared in its round header.
	inPlaceTag = 1 << 31
	// agreeTag marks AgreeShared's round header (a Barrier's is 0).
	agreeTag = 1
)

// arenaBytesFor is the arena of Options.ShmArenaBytes, or an error naming the
// bound.
func arenaBytesFor(o int64) (int, error) {
	switch {
	case o == 0:
		return DefaultShmArenaBytes, nil
	case o < 0:
		return 0, nil
	case o > maxArenaBytes:
		return 0, fmt.Errorf("comm: shared-memory arena of %d bytes is larger than supported (%d)", o, int64(maxArenaBytes))
	}
	return roundUp(int(o), 4096), nil
}

// arena is one rank's allocator over the segment's arena: free ranges in byte
// offsets, kept sorted and merged.
type arena struct {
	size     int
	free     []freeRange // sorted by off, never adjacent
	used     map[int]int
	reserved int // bytes from the start whose pages are reserved (fallocate)
}

type freeRange struct{ off, n int }

func newArena(size int) *arena {
	a := &arena{size: size, used: map[int]int{}}
	if size > 0 {
		a.free = []freeRange{{0, size}}
	}
	return a
}

// alloc returns the offset of bytes bytes (first fit), or false.
func (a *arena) alloc(bytes int) (int, bool) {
	bytes = roundUp(max(bytes, 1), arenaAlign)
	for i, f := range a.free {
		if f.n >= bytes {
			if f.n == bytes {
				a.free = slices.Delete(a.free, i, i+1)
			} else {
				a.free[i] = freeRange{f.off + bytes, f.n - bytes}
			}
			a.used[f.off] = bytes
			return f.off, true
		}
	}
	return 0, false
}

// release frees the allocation at off.
func (a *arena) release(off int) {
	n, ok := a.used[off]
	if !ok {
		panic(fmt.Sprintf("comm: FreeShared of a buffer at arena offset %d that is not allocated", off))
	}
	delete(a.used, off)
	i, _ := slices.BinarySearchFunc(a.free, off, func(s freeRange, off int) int { return s.off - off })
	a.free = slices.Insert(a.free, i, freeRange{off, n})
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = slices.Delete(a.free, i+1, i+2)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = slices.Delete(a.free, i, i+1)
	}
}

// arenaOffset is the byte offset of buf in the arena, or false when buf is not
// (wholly) in it.
func (c *shm) arenaOffset(buf []float32) (int, bool) {
	ar := c.arenaMem
	if len(ar) == 0 || len(buf) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(ar)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	if p < base || p+4*uintptr(len(buf)) > base+4*uintptr(len(ar)) {
		return 0, false
	}
	return int(p - base), true
}

// AllocShared implements SharedGatherer.
func (c *shm) AllocShared(n int) ([]float32, bool) {
	c.arenaMu.Lock()
	defer c.arenaMu.Unlock()
	if n <= 0 || c.closed.Load() || c.arenaMem == nil {
		return nil, false
	}
	off, ok := c.arena.alloc(4 * n)
	if !ok {
		return nil, false
	}
	if end := off + roundUp(4*n, arenaAlign); end > c.arena.reserved {
		// Reserve the pages first, so a full tmpfs is a fallback here, not a SIGBUS
		// when the buffer is written.
		start := c.arena.reserved // page aligned
		if err := unix.Fallocate(c.seg.fd, 0, int64(c.seg.arenaOff+start), int64(roundUp(end, 4096)-start)); err != nil {
			c.arena.release(off)
			return nil, false
		}
		c.arena.reserved = roundUp(end, 4096)
	}
	return c.arenaMem[off/4 : off/4+n : off/4+n], true
}

// FreeShared implements SharedGatherer.
func (c *shm) FreeShared(buf []float32) {
	c.arenaMu.Lock()
	defer c.arenaMu.Unlock()
	off, ok := c.arenaOffset(buf)
	if !ok {
		panic("comm: FreeShared of a buffer that AllocShared did not return")
	}
	c.arena.release(off)
}

// AllGatherShared implements SharedGatherer.
func (c *shm) AllGatherShared(ctx context.Context, dst []float32, n int, dt device.DType, fill func(piece []float32)) error {
	if n < 0 || len(dst) != n*c.size {
		return fmt.Errorf("comm: all_gather: shared dst has %d elements, want n×size = %d×%d", len(dst), n, c.size)
	}
	off, ok := c.arenaOffset(dst)
	if !ok && n > 0 {
		return fmt.Errorf("comm: all_gather: dst is not a buffer of AllocShared")
	}
	words := int64(n)
	if dt == device.BF16 {
		words = int64(n+1) / 2
	}
	bus := 4 * words * int64(c.size-1)
	// The offset, in cache lines and never 0, rides in the round headers, which
	// every rank checks against its own: all ranks gather into one buffer, or
	// none writes. The top bit says in place (below 2^30 cache lines: the arena
	// is at most maxArenaBytes).
	tag := uint32(1 + off/arenaAlign)
	if fill == nil {
		// In place: every piece was written before its owner entered, so once
		// every rank has entered, every piece is there.
		return c.collective(ctx, KindAllGather, uint64(len(dst)), tag|inPlaceTag, bus, bus, func(op *shmOp) error {
			return c.exchange(op, 0, nil, nil)
		})
	}
	return c.collective(ctx, KindAllGather, uint64(len(dst)), tag, bus, bus, func(op *shmOp) error {
		if err := c.exchange(op, 0, nil, nil); err != nil {
			return err
		}
		if n > 0 {
			fill(dst[c.rank*n : (c.rank+1)*n])
		}
		return c.exchange(op, 0, nil, nil)
	})
}

// AgreeShared implements SharedGatherer: one round carries every rank's ok and a
// hash of its buffers' offsets and lengths.
func (c *shm) AgreeShared(ctx context.Context, ok bool, bufs [][]float32) (bool, error) {
	h := fnv.New64a()
	var word [8]byte
	for _, b := range bufs {
		off, in := c.arenaOffset(b)
		ok = ok && in
		binary.LittleEndian.PutUint64(word[:], uint64(off))
		h.Write(word[:])
		binary.LittleEndian.PutUint64(word[:], uint64(len(b)))
		h.Write(word[:])
	}
	sum := h.Sum64()
	mine := [4]uint32{0, uint32(len(bufs)), uint32(sum), uint32(sum >> 32)}
	if ok {
		mine[0] = 1
	}
	all := make([][4]uint32, c.size)
	err := c.collective(ctx, KindBarrier, 0, agreeTag, 0, 0, func(op *shmOp) error {
		return c.exchange(op, len(mine),
			func(slot []float32) {
				for i, w := range mine {
					slot[i] = math.Float32frombits(w)
				}
			},
			func(slot func(int) []float32) {
				for j := range all {
					for i := range all[j] {
						all[j][i] = math.Float32bits(slot(j)[i])
					}
				}
			})
	})
	if err != nil {
		return false, err
	}
	for j, w := range all {
		if w[0] == 0 {
			return false, nil
		}
		if [3]uint32(w[1:]) != [3]uint32(all[0][1:]) {
			return false, fmt.Errorf("comm: shared buffers differ between rank %d and rank %d (%d and %d buffers): their allocators diverged", c.peers[0].Rank, c.peers[j].Rank, all[0][1], w[1])
		}
	}
	return true, nil
}

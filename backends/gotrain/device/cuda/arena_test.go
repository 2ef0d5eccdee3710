package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingSegments hands out fake addresses and counts what is live.
type countingSegments struct {
	next     uint64
	live     map[uint64]int64
	capacity int64
	used     int64
}

func newCounting(capacity int64) *countingSegments {
	return &countingSegments{next: 1 << 32, live: map[uint64]int64{}, capacity: capacity}
}

func (c *countingSegments) allocSegment(n int64) (uint64, error) {
	if c.capacity > 0 && c.used+n > c.capacity {
		return 0, fmt.Errorf("fake: %w", errDriverOOM)
	}
	p := c.next
	c.next += uint64(n) + 1<<20
	c.live[p] = n
	c.used += n
	return p, nil
}

func (c *countingSegments) freeSegment(p uint64) error {
	n, ok := c.live[p]
	if !ok {
		return fmt.Errorf("fake: free of %#x", p)
	}
	delete(c.live, p)
	c.used -= n
	return nil
}

func TestArenaSegmentsAndReuse(t *testing.T) {
	tests := []struct {
		name     string
		sizes    []int64
		reserved int64
		segments int
	}{
		{"small requests share a 2 MiB segment", []int64{1, 100, 4096, 1 << 20}, smallSegment, 1},
		{"a medium request takes a 20 MiB segment", []int64{3 << 20}, mediumSegment, 1},
		{"a large request has a segment of its own, rounded to 2 MiB", []int64{33<<20 + 1}, 34 << 20, 1},
		{"small and medium do not mix", []int64{512, 2 << 20}, smallSegment + mediumSegment, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newArena(newCounting(0))
			var ptrs []uint64
			for _, s := range tt.sizes {
				p, err := a.alloc(s)
				require.NoError(t, err)
				assert.Zero(t, p%blockAlign, "blocks are %d-byte aligned", blockAlign)
				ptrs = append(ptrs, p)
			}
			assert.Equal(t, tt.reserved, a.stats.Reserved)
			assert.Equal(t, tt.segments, a.stats.Segments)
			for _, p := range ptrs {
				require.NoError(t, a.free(p))
			}
			assert.Zero(t, a.stats.InBlocks)
			for _, s := range a.segs {
				assert.Len(t, s.blocks, 1, "freed blocks merge back into one")
			}
			for _, s := range tt.sizes { // the same requests again fit in what is reserved
				_, err := a.alloc(s)
				require.NoError(t, err)
			}
			assert.Equal(t, tt.reserved, a.stats.Reserved, "no new segment for reused memory")
			require.NoError(t, a.close())
		})
	}
}

func TestArenaReleasesEmptySegmentsUnderPressure(t *testing.T) {
	segs := newCounting(40 << 20)
	a := newArena(segs)
	p, err := a.alloc(30 << 20)
	require.NoError(t, err)
	require.NoError(t, a.free(p))
	_, err = a.alloc(34 << 20) // does not fit the 30 MiB free block nor beside it
	require.NoError(t, err, "the empty segment goes back to the driver first")
	assert.Equal(t, int64(34<<20), a.stats.Reserved)
	_, err = a.alloc(20 << 20)
	require.ErrorIs(t, err, errDriverOOM)
	require.Error(t, a.free(12345), "a foreign address")
	require.NoError(t, a.close())
	assert.Empty(t, segs.live)
}

// TestArenaRandomSequence runs random allocations and frees and checks the
// invariants after each: blocks tile their segments, no two live blocks overlap,
// InBlocks is the sum of live blocks, and freeing everything leaves single blocks.
func TestArenaRandomSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	segs := newCounting(0)
	a := newArena(segs)
	live := map[uint64]int64{}
	for range 3000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			for p := range live {
				require.NoError(t, a.free(p))
				delete(live, p)
				break
			}
		} else {
			n := int64(1 + rng.IntN(3<<20))
			if rng.IntN(10) == 0 {
				n = int64(10<<20 + rng.IntN(20<<20))
			}
			p, err := a.alloc(n)
			require.NoError(t, err)
			live[p] = n
		}
		var inBlocks int64
		for _, s := range a.segs {
			off := int64(0)
			for i, b := range s.blocks {
				require.Equal(t, off, b.off, "blocks tile the segment")
				off += b.size
				if b.used {
					inBlocks += b.size
					require.GreaterOrEqual(t, b.size, live[s.base+uint64(b.off)])
				} else if i > 0 {
					require.True(t, s.blocks[i-1].used, "free neighbours are merged")
				}
			}
			require.Equal(t, s.size, off)
		}
		require.Equal(t, inBlocks, a.stats.InBlocks)
	}
	for p := range live {
		require.NoError(t, a.free(p))
	}
	for _, s := range a.segs {
		require.Len(t, s.blocks, 1)
	}
	require.NoError(t, a.close())
	assert.Empty(t, segs.live)
}

package comm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// sharedGatherers returns comms as SharedGatherers (the shm communicator).
func sharedGatherers(t *testing.T, comms []Communicator) []SharedGatherer {
	t.Helper()
	out := make([]SharedGatherer, len(comms))
	for r, c := range comms {
		sg, ok := c.(SharedGatherer)
		require.True(t, ok, "rank %d: %T shares no buffers", r, c)
		out[r] = sg
	}
	return out
}

// TestSharedAllGather gathers into shared buffers, from a private src and in
// place, and checks that every rank reads every piece through its own mapping,
// that the byte counts are the copying all-gather's, and that nothing is left in
// the segment directory.
func TestSharedAllGather(t *testing.T) {
	for _, size := range []int{2, 3, 4} {
		for _, mode := range []string{"private-src", "in-place", "shared-api-bf16"} {
			t.Run(fmt.Sprintf("ws%d/%s", size, mode), func(t *testing.T) {
				dir := shmTestDir(t)
				comms := newGroup(t, size, Options{Transport: TransportShm, ShmDir: dir, ShmArenaBytes: 1 << 20})
				sgs := sharedGatherers(t, comms)
				const n = 1001 // odd: pieces that do not fill cache lines
				dst := make([][]float32, size)
				offs := make([]int, size)
				for r := range size {
					var ok bool
					_, ok = sgs[r].AllocShared(17) // something allocated before, at the same place everywhere
					require.True(t, ok)
					dst[r], ok = sgs[r].AllocShared(n * size)
					require.True(t, ok)
					offs[r], ok = comms[r].(*shm).arenaOffset(dst[r])
					require.True(t, ok)
				}
				for r := 1; r < size; r++ {
					require.Equal(t, offs[0], offs[r], "rank %d's buffer is rank 0's", r)
				}
				rounds := make([]uint64, size)
				for r := range size {
					rounds[r] = comms[r].(*shm).rounds
				}
				run(t, comms, func(r int, c Communicator) error {
					src := rankData(r, n)
					switch mode {
					case "private-src":
						return c.AllGather(context.Background(), dst[r], src)
					case "in-place":
						// A fresh buffer no one reads yet: the piece may be written first,
						// and the all-gather then copies nothing.
						piece := dst[r][r*n : (r+1)*n]
						copy(piece, src)
						return c.AllGather(context.Background(), dst[r], piece)
					default:
						return sgs[r].AllGatherShared(context.Background(), dst[r], n, device.BF16, func(p []float32) {
							for i, v := range src {
								p[i] = device.RoundBF16(v)
							}
						})
					}
				})
				{
					for r := range size {
						for j := range size {
							want := rankData(j, n)
							if mode == "shared-api-bf16" {
								for i, v := range want {
									want[i] = device.RoundBF16(v)
								}
							}
							requireSame(t, want, dst[r][j*n:(j+1)*n], fmt.Sprintf("rank %d reads rank %d's piece", r, j))
						}
					}
				}
				words := int64(n)
				if mode == "shared-api-bf16" {
					words = (n + 1) / 2
				}
				for r, c := range comms {
					s := c.Stats().AllGather
					assert.Equal(t, int64(1), s.Calls, "rank %d", r)
					// In place, the pieces are there when their owners enter: one
					// barrier; else an enter and an exit barrier around the fill.
					wantRounds := uint64(2)
					if mode == "in-place" {
						wantRounds = 1
					}
					assert.Equal(t, wantRounds, c.(*shm).rounds-rounds[r], "rank %d: rounds", r)
					assert.Equal(t, 4*words*int64(size-1), s.BytesSent, "rank %d: the copying all-gather's bytes", r)
				}
				for r := range size {
					sgs[r].FreeShared(dst[r])
				}
				for _, c := range comms {
					require.NoError(t, c.Close())
				}
				requireNoSegments(t, dir)
			})
		}
	}
}

// TestSharedBufferReuseWaitsForReaders is the hazard the enter barrier exists for:
// rank 0 frees a gathered buffer and gathers the next unit into the same memory
// while rank 1 still reads the previous unit there. Rank 0's piece must not be
// written before rank 1 is done: the fill checks that rank 1 said so, and rank 1
// checks that what it read stayed the first gather's.
func TestSharedBufferReuseWaitsForReaders(t *testing.T) {
	for _, size := range []int{2, 4} {
		t.Run(fmt.Sprintf("ws%d", size), func(t *testing.T) {
			comms := newGroup(t, size, Options{Transport: TransportShm, ShmArenaBytes: 1 << 20})
			sgs := sharedGatherers(t, comms)
			const n, slow = 4096, 1
			var slowDone atomic.Bool
			errs := eachRank(size, func(r int) error {
				ctx := context.Background()
				first, _ := sgs[r].AllocShared(n * size)
				if err := sgs[r].AllGatherShared(ctx, first, n, device.F32, func(p []float32) { copy(p, rankData(r, n)) }); err != nil {
					return err
				}
				if r == slow { // still reading the first unit while the others move on
					time.Sleep(300 * time.Millisecond)
					for j := range size {
						if !assert.Equal(t, rankData(j, n), first[j*n:(j+1)*n], "rank %d's piece of the first gather, read late", j) {
							break
						}
					}
					slowDone.Store(true)
				}
				sgs[r].FreeShared(first)
				second, _ := sgs[r].AllocShared(n * size)
				if &second[0] != &first[0] {
					return fmt.Errorf("rank %d: the second buffer is not the first's memory: the test tests nothing", r)
				}
				err := sgs[r].AllGatherShared(ctx, second, n, device.F32, func(p []float32) {
					assert.True(t, slowDone.Load(), "rank %d writes its piece while rank %d still reads the memory", r, slow)
					copy(p, rankData(r+size, n))
				})
				if err != nil {
					return err
				}
				for j := range size {
					requireSame(t, rankData(j+size, n), second[j*n:(j+1)*n], fmt.Sprintf("rank %d reads rank %d's second piece", r, j))
				}
				sgs[r].FreeShared(second)
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}

// TestSharedAllGatherMismatch: a rank whose buffer is elsewhere in the arena, or
// private, or that gathers in place where rank 0 copies its piece in, fails the
// all-gather on every rank as out of step, before anyone writes.
func TestSharedAllGatherMismatch(t *testing.T) {
	for _, tc := range []struct{ name, rank1 string }{
		{"other-offset", "shifted"},
		{"private", "private"},
		{"in-place-vs-fill", "in-place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := newGroup(t, 2, Options{Transport: TransportShm, ShmArenaBytes: 1 << 20})
			sgs := sharedGatherers(t, comms)
			const n = 256
			dst := make([][]float32, 2)
			dst[0], _ = sgs[0].AllocShared(2 * n)
			switch tc.rank1 {
			case "shifted":
				_, _ = sgs[1].AllocShared(64)
				dst[1], _ = sgs[1].AllocShared(2 * n)
			case "in-place":
				dst[1], _ = sgs[1].AllocShared(2 * n)
			default:
				dst[1] = make([]float32, 2*n)
			}
			clear(dst[0])
			errs := eachRank(2, func(r int) error {
				if r == 1 && tc.rank1 == "in-place" {
					return sgs[r].AllGatherShared(context.Background(), dst[r], n, device.F32, nil)
				}
				return comms[r].AllGather(context.Background(), dst[r], rankData(r, n))
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.Contains(t, err.Error(), "out of step", "rank %d", r)
			}
			assert.Equal(t, make([]float32, 2*n), dst[0], "nothing written into rank 0's shared buffer")
		})
	}
}

// TestSharedArenaFallback: the arena's bound, its absence, a full arena that
// frees up again, and the allocator's merging of freed neighbours.
func TestSharedArenaFallback(t *testing.T) {
	t.Run("bounds", func(t *testing.T) {
		for _, tc := range []struct {
			opt  int64
			want int
			err  string
		}{
			{0, DefaultShmArenaBytes, ""},
			{-1, 0, ""},
			{1, 4096, ""},
			{maxArenaBytes + 1, 0, "larger than supported"},
		} {
			got, err := arenaBytesFor(tc.opt)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err, "%d", tc.opt)
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "%d", tc.opt)
		}
	})
	t.Run("no-arena", func(t *testing.T) {
		comms := newGroup(t, 2, Options{Transport: TransportShm, ShmArenaBytes: -1})
		for _, sg := range sharedGatherers(t, comms) {
			_, ok := sg.AllocShared(16)
			assert.False(t, ok, "no arena: every gathered buffer is private")
		}
	})
	t.Run("full-then-free", func(t *testing.T) {
		comms := newGroup(t, 2, Options{Transport: TransportShm, ShmArenaBytes: 8192})
		for _, sg := range sharedGatherers(t, comms) {
			a, ok := sg.AllocShared(1024) // 4096 bytes
			require.True(t, ok)
			b, ok := sg.AllocShared(1024)
			require.True(t, ok)
			_, ok = sg.AllocShared(1)
			assert.False(t, ok, "the arena is full")
			sg.FreeShared(a)
			sg.FreeShared(b)
			c, ok := sg.AllocShared(2048)
			require.True(t, ok, "freed neighbours merge into one range")
			assert.Same(t, &a[0], &c[0])
			sg.FreeShared(c)
		}
	})
	t.Run("allocator", func(t *testing.T) {
		a := newArena(1024)
		x, _ := a.alloc(100) // 128
		y, _ := a.alloc(64)
		z, _ := a.alloc(256)
		assert.Equal(t, []int{0, 128, 192}, []int{x, y, z})
		a.release(y)
		w, ok := a.alloc(64)
		assert.True(t, ok)
		assert.Equal(t, 128, w, "first fit reuses the hole")
		a.release(x)
		a.release(w)
		a.release(z)
		assert.Equal(t, []freeRange{{0, 1024}}, a.free)
		assert.Panics(t, func() { a.release(4) })
	})
}

// TestSharedAllGatherPeerDies: a rank that closes its communicator (to its peers,
// the same as dying: its liveness lock goes), or that never joins (hung), while
// the others wait in a shared all-gather, filled or in place (fsdp's zero-copy
// gathers: a barrier), is named by all within bounded time.
func TestSharedAllGatherPeerDies(t *testing.T) {
	const size, victim = 3, 2
	const opTimeout = 300 * time.Millisecond
	for _, how := range []string{"dies", "hangs"} {
		for _, mode := range []string{"fill", "in-place"} {
			t.Run(how+"/"+mode, func(t *testing.T) {
				comms := newGroup(t, size, Options{Transport: TransportShm, ShmArenaBytes: 1 << 20, OpTimeout: opTimeout})
				sgs := sharedGatherers(t, comms)
				const n = 64
				dst := make([][]float32, size)
				for r := range size {
					dst[r], _ = sgs[r].AllocShared(n * size)
				}
				var closedAt time.Time
				ended := make([]time.Time, size)
				start := time.Now()
				errs := eachRank(size, func(r int) error {
					if r == victim {
						if how == "hangs" {
							return nil // never joins
						}
						time.Sleep(50 * time.Millisecond)
						closedAt = time.Now()
						return comms[r].Close()
					}
					fill := func(p []float32) { copy(p, rankData(r, n)) }
					if mode == "in-place" {
						copy(dst[r][r*n:(r+1)*n], rankData(r, n))
						fill = nil
					}
					err := sgs[r].AllGatherShared(context.Background(), dst[r], n, device.F32, fill)
					ended[r] = time.Now()
					return err
				})
				for r, err := range errs {
					if r == victim {
						require.NoError(t, err)
						continue
					}
					pe := requirePeerError(t, err, victim, fmt.Sprintf("rank %d", r))
					if how == "dies" {
						assert.Less(t, ended[r].Sub(closedAt), 2*time.Second, "rank %d named the dead rank within bounded time", r)
					} else {
						assert.Contains(t, pe.Reason, "did nothing in the collective for 300ms", "rank %d", r)
						assert.Less(t, ended[r].Sub(start), opTimeout+2*time.Second, "rank %d named the hung rank within bounded time", r)
					}
				}
			})
		}
	}
}

// TestAgreeShared: the ranks' decision on shared buffers is one for all: true when
// every rank has its buffers, false on every rank when one has no room, and an
// error on every rank when their buffers lie at different offsets.
func TestAgreeShared(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
		err  string
	}{
		{"all-fit", true, ""},
		{"rank1-no-room", false, ""},
		{"rank1-shifted", false, "allocators diverged"},
		{"rank1-fewer", false, "allocators diverged"},
		{"rank1-private", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 3
			comms := newGroup(t, size, Options{Transport: TransportShm, ShmArenaBytes: 1 << 20})
			sgs := sharedGatherers(t, comms)
			got := make([]bool, size)
			errs := eachRank(size, func(r int) error {
				ok, odd := true, r == 1
				if odd && tc.name == "rank1-shifted" {
					_, _ = sgs[r].AllocShared(3)
				}
				var bufs [][]float32
				for _, n := range []int{100, 7, 4096} {
					b, fits := sgs[r].AllocShared(n)
					assert.True(t, fits, "rank %d", r)
					bufs = append(bufs, b)
				}
				switch {
				case odd && tc.name == "rank1-no-room":
					ok = false
				case odd && tc.name == "rank1-fewer":
					bufs = bufs[:2]
				case odd && tc.name == "rank1-private":
					bufs[2] = make([]float32, 4096) // not in the arena: not ok
				}
				var err error
				got[r], err = sgs[r].AgreeShared(context.Background(), ok, bufs)
				return err
			})
			for r, err := range errs {
				if tc.err != "" {
					assert.ErrorContains(t, err, tc.err, "rank %d", r)
					continue
				}
				require.NoError(t, err, "rank %d", r)
				assert.Equal(t, tc.want, got[r], "rank %d", r)
			}
			for r, c := range comms {
				assert.Equal(t, int64(1), c.Stats().Barrier.Calls, "rank %d: counted as a barrier", r)
				assert.Zero(t, c.Stats().Barrier.BytesSent, "rank %d: no bus bytes", r)
			}
		})
	}
}

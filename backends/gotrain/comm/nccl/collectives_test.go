//go:build cgo

package nccl

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
)

// collective runs one collective on rank r with input in and returns the
// result, through host slices or through cpu buffers (BufferCollectives).
type collective struct {
	name string
	// outLen is the result's length for n input elements per rank.
	inLen, outLen func(n, size int) int
	host          func(ctx context.Context, c comm.Communicator, out, in []float32) error
	buf           func(ctx context.Context, b comm.BufferCollectives, out, in device.Buffer) error
}

var collectives = []collective{
	{
		name:   "all_gather",
		inLen:  func(n, _ int) int { return n },
		outLen: func(n, size int) int { return n * size },
		host: func(ctx context.Context, c comm.Communicator, out, in []float32) error {
			return c.AllGather(ctx, out, in)
		},
		buf: func(ctx context.Context, b comm.BufferCollectives, out, in device.Buffer) error {
			return b.AllGatherBuffers(ctx, out, in)
		},
	},
	{
		name:   "reduce_scatter_avg",
		inLen:  func(n, size int) int { return n * size },
		outLen: func(n, _ int) int { return n },
		host: func(ctx context.Context, c comm.Communicator, out, in []float32) error {
			return c.ReduceScatter(ctx, out, in, comm.Average)
		},
		buf: func(ctx context.Context, b comm.BufferCollectives, out, in device.Buffer) error {
			return b.ReduceScatterBuffers(ctx, out, in, comm.Average)
		},
	},
	{
		name:   "all_reduce_sum",
		inLen:  func(n, _ int) int { return n },
		outLen: func(n, _ int) int { return n },
		host: func(ctx context.Context, c comm.Communicator, out, in []float32) error {
			copy(out, in)
			return c.AllReduce(ctx, out, comm.Sum)
		},
		buf: func(ctx context.Context, b comm.BufferCollectives, out, in device.Buffer) error {
			out.Device().Copy(out, in)
			return b.AllReduceBuffers(ctx, out, comm.Sum)
		},
	},
	{
		name:   "all_reduce_avg",
		inLen:  func(n, _ int) int { return n },
		outLen: func(n, _ int) int { return n },
		host: func(ctx context.Context, c comm.Communicator, out, in []float32) error {
			copy(out, in)
			return c.AllReduce(ctx, out, comm.Average)
		},
		buf: func(ctx context.Context, b comm.BufferCollectives, out, in device.Buffer) error {
			out.Device().Copy(out, in)
			return b.AllReduceBuffers(ctx, out, comm.Average)
		},
	},
	{
		name:   "broadcast",
		inLen:  func(n, _ int) int { return n },
		outLen: func(n, _ int) int { return n },
		host: func(ctx context.Context, c comm.Communicator, out, in []float32) error {
			copy(out, in)
			return c.Broadcast(ctx, out, c.Size()-1)
		},
		buf: func(ctx context.Context, b comm.BufferCollectives, out, in device.Buffer) error {
			out.Device().Copy(out, in)
			return b.BroadcastBuffers(ctx, out, 0)
		},
	},
}

// TestCollectivesMatchTheTCPRing runs every collective through the NCCL
// communicator over the fake, on host slices and on cpu buffers, and checks it
// bitwise against the TCP ring on the same inputs (the fake reduces in the
// ring's order), for sizes across the fake's chunking and uneven segments.
func TestCollectivesMatchTheTCPRing(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{1, 2, 3, 4} {
		tcp := tcpGroup(t, size, comm.Options{})
		nc := ncclGroup(t, size, Options{})
		for _, co := range collectives {
			for _, n := range []int{1, 7, 1<<16 + 3} {
				t.Run(fmt.Sprintf("%s/ws%d/n%d", co.name, size, n), func(t *testing.T) {
					want := make([][]float32, size)
					errs := eachRank(size, func(r int) error {
						want[r] = make([]float32, co.outLen(n, size))
						return co.host(ctx, tcp[r], want[r], rankData(r, co.inLen(n, size)))
					})
					for r, err := range errs {
						require.NoError(t, err, "tcp rank %d", r)
					}
					got := make([][]float32, size)
					errs = eachRank(size, func(r int) error {
						got[r] = make([]float32, co.outLen(n, size))
						return co.host(ctx, nc[r], got[r], rankData(r, co.inLen(n, size)))
					})
					for r, err := range errs {
						require.NoError(t, err, "nccl rank %d", r)
						requireSame(t, want[r], got[r], fmt.Sprintf("host slices, rank %d", r))
					}
					errs = eachRank(size, func(r int) error {
						dev := cpu.New(cpu.Options{})
						in, err := dev.Alloc(co.inLen(n, size), device.Comm)
						if err != nil {
							return err
						}
						out, err := dev.Alloc(co.outLen(n, size), device.Comm)
						if err != nil {
							return err
						}
						dev.CopyFromHost(in, rankData(r, co.inLen(n, size)))
						if err := co.buf(ctx, comm.OnBuffers(nc[r]), out, in); err != nil {
							return err
						}
						got[r] = out.(device.HostBuffer).Host()
						return nil
					})
					for r, err := range errs {
						require.NoError(t, err, "nccl buffers rank %d", r)
						if co.name == "broadcast" {
							// The buffer form broadcasts from rank 0.
							requireSame(t, rankData(0, n), got[r], fmt.Sprintf("buffers, rank %d", r))
							continue
						}
						requireSame(t, want[r], got[r], fmt.Sprintf("buffers, rank %d", r))
					}
				})
			}
		}
		t.Run(fmt.Sprintf("barrier_and_stats/ws%d", size), func(t *testing.T) {
			for r, err := range eachRank(size, func(r int) error { return nc[r].Barrier(ctx) }) {
				require.NoError(t, err, "rank %d", r)
			}
			st := nc[0].Stats()
			assert.EqualValues(t, 1, st.Barrier.Calls)
			assert.EqualValues(t, 3*2, st.AllGather.Calls, "three sizes, host and buffers")
			assert.EqualValues(t, int64(4*7*(size-1)+4*(size-1)+4*(1<<16+3)*(size-1))*2, st.AllGather.BytesSent,
				"the ring's bytes for the same calls")
		})
	}
}

func TestSplitMatchesTheTCPRing(t *testing.T) {
	ctx := context.Background()
	const size = 4
	for _, tt := range []struct {
		name    string
		version string
		split   bool
	}{
		{"ncclCommSplit", "22703", true},
		{"fresh unique id before 2.18.1", "21703", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("FSDPBENCH_FAKE_NCCL_VERSION", tt.version)
			lib, err := open()
			require.NoError(t, err)
			require.Equal(t, tt.split, lib.HasSplit())
			nc := ncclGroup(t, size, Options{})
			for _, c := range nc {
				c.lib = lib
			}
			tcp := tcpGroup(t, size, comm.Options{})
			// Colors: hybrid_shard's shard groups {0,1},{2,3} with keys reversed
			// inside, and rank 3 left out of a second split.
			color := func(r int) int { return r / 2 }
			key := func(r int) int { return -r }
			type res struct {
				rank, size int
				sum        []float32
			}
			do := func(cs func(r int) comm.Communicator) []res {
				out := make([]res, size)
				errs := eachRank(size, func(r int) error {
					sub, err := cs(r).Split(ctx, color(r), key(r))
					if err != nil {
						return err
					}
					defer sub.Close()
					buf := rankData(r, 5)
					if err := sub.AllReduce(ctx, buf, comm.Sum); err != nil {
						return err
					}
					out[r] = res{sub.Rank(), sub.Size(), buf}
					none := comm.NoColor
					if r != 3 {
						none = 0
					}
					left, err := cs(r).Split(ctx, none, r)
					if err != nil {
						return err
					}
					if r == 3 {
						if left != nil {
							return fmt.Errorf("rank 3 passed NoColor and got a communicator")
						}
						return nil
					}
					defer left.Close()
					if left.Size() != 3 || left.Rank() != r {
						return fmt.Errorf("rank %d: group of %d, rank %d; want 3, %d", r, left.Size(), left.Rank(), r)
					}
					return left.Barrier(ctx)
				})
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
				return out
			}
			want := do(func(r int) comm.Communicator { return tcp[r] })
			got := do(func(r int) comm.Communicator { return nc[r] })
			for r := range size {
				assert.Equal(t, want[r].rank, got[r].rank, "rank %d", r)
				assert.Equal(t, 1-r%2, got[r].rank, "keys reverse the order")
				assert.Equal(t, want[r].size, got[r].size)
				requireSame(t, want[r].sum, got[r].sum, fmt.Sprintf("rank %d", r))
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Run("missing library names what was tried", func(t *testing.T) {
		t.Setenv(dynload.NCCL.EnvVar, "/nonexistent/libnccl.so.2")
		_, err := Load()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "/nonexistent/libnccl.so.2")
		assert.Contains(t, err.Error(), "FSDPBENCH_LIBNCCL")
	})
	t.Run("a library that is not NCCL", func(t *testing.T) {
		t.Setenv(dynload.NCCL.EnvVar, "libm.so.6")
		_, err := Load()
		require.ErrorContains(t, err, "libm.so.6 is not a usable NCCL")
		require.ErrorContains(t, err, "ncclGetVersion")
	})
	t.Run("too old", func(t *testing.T) {
		t.Setenv("FSDPBENCH_FAKE_NCCL_VERSION", "2903")
		_, err := open()
		require.ErrorContains(t, err, "NCCL 2.9.3; the trainer needs 2.10 or newer")
	})
	t.Run("the fake loads and says so", func(t *testing.T) {
		l, err := Load()
		require.NoError(t, err)
		assert.Equal(t, fakePath, l.Path)
		assert.Equal(t, "2.27.3", l.VersionString())
		assert.True(t, l.HostMemory)
	})
}

// TestOptionsAreBounded: a bad timeout or poll is refused where it enters.
func TestOptionsAreBounded(t *testing.T) {
	for _, o := range []Options{{Timeout: -1}, {Timeout: 25 * 3600e9}, {Poll: 1}, {Poll: 11e9}} {
		_, err := o.withDefaults()
		assert.Error(t, err, "%+v", o)
	}
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, comm.DefaultOpTimeout, o.Timeout)
}

// TestHostPointersNeedAHostMemoryLibrary: with a real NCCL, cpu buffers and
// host slices are refused with a clear error instead of handing NCCL host
// memory.
func TestHostPointersNeedAHostMemoryLibrary(t *testing.T) {
	nc := ncclGroup(t, 1, Options{})
	real := *nc[0].lib
	real.HostMemory = false
	nc[0].lib = &real
	b, err := cpu.New(cpu.Options{}).Alloc(3, device.Grads)
	require.NoError(t, err)
	err = nc[0].AllReduceBuffers(context.Background(), b, comm.Sum)
	require.ErrorContains(t, err, "have no device pointer")
	err = nc[0].AllReduce(context.Background(), []float32{1}, comm.Sum)
	require.ErrorContains(t, err, "needs the device's staging")
}

// TestTwoRanksOnOneGPU: NCCL before 2.30 refuses a second rank on a GPU with
// ncclInvalidUsage at init; the error says why and what to do.
func TestTwoRanksOnOneGPU(t *testing.T) {
	t.Setenv("FSDPBENCH_FAKE_NCCL_FAULT", "dupgpu")
	for _, tt := range []struct {
		version  string
		wantHint bool
	}{{"22703", true}, {"23000", false}} {
		t.Run(tt.version, func(t *testing.T) {
			t.Setenv("FSDPBENCH_FAKE_NCCL_VERSION", tt.version)
			lib, err := open()
			require.NoError(t, err)
			lib.HostMemory = false // as a real NCCL
			id, err := lib.uniqueID()
			require.NoError(t, err)
			_, err = lib.initRank(2, 1, id)
			require.ErrorContains(t, err, "ncclCommInitRank (rank 1 of 2): invalid usage")
			if tt.wantHint {
				assert.ErrorContains(t, err, "refuses two ranks on one GPU (2.30 allows it with NCCL_MULTI_RANK_GPU_ENABLE=1)")
			} else {
				assert.NotContains(t, err.Error(), "two ranks")
			}
		})
	}
}

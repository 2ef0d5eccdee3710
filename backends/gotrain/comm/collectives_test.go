package comm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// groupCase is one communicator configuration the collective tests run on.
type groupCase struct {
	name    string
	size    int
	opts    Options
	lengths []int // per-rank shard lengths (all-gather, reduce-scatter) and buffer lengths (all-reduce, broadcast)
}

func groupCases() []groupCase {
	var cases []groupCase
	for _, tr := range []string{TransportTCP, TransportShm} {
		for size := 1; size <= 4; size++ {
			cases = append(cases,
				groupCase{name: fmt.Sprintf("%s/ws%d", tr, size), size: size, opts: Options{Transport: tr}, lengths: []int{0, 1, 7, 1<<20 + 3}},
				// Tiny frames (rounds, on shm): many per segment exercise pipelining
				// and the dependencies between steps, including segments of unequal
				// length.
				groupCase{name: fmt.Sprintf("%s/ws%d-chunk12B", tr, size), size: size, opts: Options{Transport: tr, ChunkBytes: 12}, lengths: []int{0, 1, 5, 13, 37, 100}},
			)
		}
	}
	cases = append(cases, groupCase{name: "tcp/ws3-portable-encoding", size: 3, opts: Options{Transport: TransportTCP, ChunkBytes: 40, portable: true}, lengths: []int{0, 1, 29, 1000}})
	return cases
}

func TestCollectives(t *testing.T) {
	for _, gc := range groupCases() {
		t.Run(gc.name, func(t *testing.T) {
			comms := newGroup(t, gc.size, gc.opts)
			for _, n := range gc.lengths {
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					// n is the per-rank shard of all-gather and reduce-scatter, except
					// for the large case, where the whole buffer is about n long.
					shard := n
					if n > 1<<16 {
						shard = n / gc.size
					}
					checkAllGather(t, comms, shard)
					checkReduceScatter(t, comms, shard, Sum)
					checkReduceScatter(t, comms, shard, Average)
					checkAllReduce(t, comms, n, Sum)
					checkAllReduce(t, comms, n, Average)
					checkBroadcast(t, comms, n)
				})
			}
		})
	}
}

var (
	inputsMu    sync.Mutex
	inputsCache = map[[2]int][][]float32{}
)

// inputs returns fresh copies of every rank's data (generated once per shape: the
// generator is slow under the race detector, copying is not).
func inputs(size, n int) [][]float32 {
	inputsMu.Lock()
	defer inputsMu.Unlock()
	key := [2]int{size, n}
	if _, ok := inputsCache[key]; !ok {
		in := make([][]float32, size)
		for r := range in {
			in[r] = rankData(r, n)
		}
		inputsCache[key] = in
	}
	out := make([][]float32, size)
	for r, in := range inputsCache[key] {
		out[r] = slices.Clone(in)
	}
	return out
}

func checkAllGather(t *testing.T, comms []Communicator, n int) {
	size := len(comms)
	in := inputs(size, n)
	out := make([][]float32, size)
	run(t, comms, func(r int, c Communicator) error {
		out[r] = make([]float32, n*size)
		return c.AllGather(context.Background(), out[r], in[r])
	})
	want := slices.Concat(in...)
	for r := range comms {
		requireSame(t, want, out[r], fmt.Sprintf("all_gather on rank %d", r))
	}
}

func checkReduceScatter(t *testing.T, comms []Communicator, n int, op Op) {
	size := len(comms)
	in := inputs(size, n*size)
	saved := inputs(size, n*size)
	out := make([][]float32, size)
	run(t, comms, func(r int, c Communicator) error {
		out[r] = make([]float32, n)
		return c.ReduceScatter(context.Background(), out[r], in[r], op)
	})
	for r := range comms {
		requireSame(t, saved[r], in[r], "reduce_scatter must not modify src")
		ref := make([]float64, n)
		exact := make([]float32, n)
		for i := range n {
			ref[i] = seqSum(in, r*n+i)
			exact[i] = ringSum(in, r, r*n+i)
			if op == Average {
				ref[i] /= float64(size)
				exact[i] /= float32(size)
			}
		}
		requireClose(t, ref, out[r], fmt.Sprintf("reduce_scatter %v on rank %d", op, r))
		requireSame(t, exact, out[r], fmt.Sprintf("reduce_scatter %v on rank %d sums in the documented ring order", op, r))
	}
}

func checkAllReduce(t *testing.T, comms []Communicator, n int, op Op) {
	size := len(comms)
	in := inputs(size, n)
	bufs := inputs(size, n)
	run(t, comms, func(r int, c Communicator) error {
		return c.AllReduce(context.Background(), bufs[r], op)
	})
	ref := make([]float64, n)
	exact := make([]float32, n)
	for j := range size {
		lo, hi := segBounds(n, size, j)
		for i := lo; i < hi; i++ {
			ref[i] = seqSum(in, i)
			exact[i] = ringSum(in, j, i)
			if op == Average {
				ref[i] /= float64(size)
				exact[i] /= float32(size)
			}
		}
	}
	for r := range comms {
		requireClose(t, ref, bufs[r], fmt.Sprintf("all_reduce %v on rank %d", op, r))
		requireSame(t, exact, bufs[r], fmt.Sprintf("all_reduce %v: rank %d holds the ring-order sum, bitwise", op, r))
	}
}

func checkBroadcast(t *testing.T, comms []Communicator, n int) {
	size := len(comms)
	for root := range size {
		bufs := inputs(size, n)
		want := slices.Clone(bufs[root])
		run(t, comms, func(r int, c Communicator) error {
			return c.Broadcast(context.Background(), bufs[r], root)
		})
		for r := range comms {
			requireSame(t, want, bufs[r], fmt.Sprintf("broadcast from %d on rank %d", root, r))
		}
	}
}

func TestAllReduceIsDeterministic(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testAllReduceIsDeterministic(t, tr) })
	}
}

func testAllReduceIsDeterministic(t *testing.T, tr string) {
	comms := newGroup(t, 3, Options{ChunkBytes: 4096, Transport: tr})
	const n = 100_003
	var first [][]float32
	for range 3 {
		bufs := inputs(3, n)
		run(t, comms, func(r int, c Communicator) error { return c.AllReduce(context.Background(), bufs[r], Sum) })
		if first == nil {
			first = bufs
			continue
		}
		for r := range bufs {
			requireSame(t, first[r], bufs[r], fmt.Sprintf("run-to-run bitwise identical on rank %d", r))
		}
	}
}

func TestBarrier(t *testing.T) {
	for _, tr := range transports {
		for size := 1; size <= 4; size++ {
			t.Run(fmt.Sprintf("%s/%d", tr, size), func(t *testing.T) { testBarrier(t, tr, size) })
		}
	}
}

func testBarrier(t *testing.T, tr string, size int) {
	comms := newGroup(t, size, Options{Transport: tr})
	var entered atomic.Int32
	run(t, comms, func(r int, c Communicator) error {
		time.Sleep(time.Duration(r) * 20 * time.Millisecond) // arrive one after another
		entered.Add(1)
		if err := c.Barrier(context.Background()); err != nil {
			return err
		}
		if got := entered.Load(); got != int32(size) {
			return fmt.Errorf("rank %d left the barrier when %d of %d had entered", r, got, size)
		}
		return nil
	})
}

func TestSplitHybridGroups(t *testing.T) {
	for _, tt := range []struct {
		name            string
		transport       string
		nodes           int
		shard, replicas any // the communicator types the groups get
	}{
		{"tcp", TransportTCP, 1, &ring{}, &ring{}},
		{"shm-one-node", TransportShm, 1, &shm{}, &shm{}},
		// The layout hybrid_shard runs on: shared memory inside each node, TCP
		// between the nodes.
		{"auto-two-nodes", TransportAuto, 2, &shm{}, &ring{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const size, perNode = 4, 2
			comms := newGroupOnNodes(t, size, size/tt.nodes, Options{ChunkBytes: 64, Transport: tt.transport})
			testSplitHybridGroups(t, comms, tt.shard, tt.replicas)
		})
	}
}

func testSplitHybridGroups(t *testing.T, comms []Communicator, shardType, replType any) {
	const size, perNode = 4, 2
	shard := make([]Communicator, size)
	repl := make([]Communicator, size)
	run(t, comms, func(r int, c Communicator) error {
		var err error
		// The shard group: consecutive local ranks of one "node".
		if shard[r], err = c.Split(context.Background(), r/perNode, r); err != nil {
			return err
		}
		// The replicate group: the same local rank on every node.
		repl[r], err = c.Split(context.Background(), r%perNode, r)
		return err
	})
	t.Cleanup(func() {
		for r := range size {
			shard[r].Close()
			repl[r].Close()
		}
	})
	for r := range size {
		require.IsType(t, shardType, shard[r])
		require.IsType(t, replType, repl[r])
		require.Equal(t, perNode, shard[r].Size())
		require.Equal(t, r%perNode, shard[r].Rank())
		require.Equal(t, size/perNode, repl[r].Size())
		require.Equal(t, r/perNode, repl[r].Rank())
	}

	// Both groups at once, on their own goroutines, as hybrid sharding runs them.
	const n = 1001
	in := inputs(size, n)
	gathered := make([][]float32, size)
	reduced := inputs(size, n)
	run(t, comms, func(r int, _ Communicator) error {
		errs := eachRank(2, func(which int) error {
			if which == 0 {
				gathered[r] = make([]float32, n*perNode)
				return shard[r].AllGather(context.Background(), gathered[r], in[r])
			}
			return repl[r].AllReduce(context.Background(), reduced[r], Sum)
		})
		return cmpErr(errs...)
	})
	for r := range size {
		node := r / perNode
		require.Equal(t, slices.Concat(in[node*perNode:(node+1)*perNode]...), gathered[r], "shard group of rank %d", r)
		ref := make([]float64, n)
		for i := range ref {
			for peer := r % perNode; peer < size; peer += perNode {
				ref[i] += float64(in[peer][i])
			}
		}
		requireClose(t, ref, reduced[r], fmt.Sprintf("replicate group of rank %d", r))
	}
	assert.Equal(t, int64(1), shard[0].Stats().AllGather.Calls)
	assert.Equal(t, int64(0), shard[0].Stats().AllReduce.Calls, "sub-groups count their own traffic")
	assert.Equal(t, int64(2), comms[0].Stats().Split.Calls)
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestSplitKeyOrderAndNoColor(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testSplitKeyOrderAndNoColor(t, tr) })
	}
}

func testSplitKeyOrderAndNoColor(t *testing.T, tr string) {
	comms := newGroup(t, 3, Options{Transport: tr})
	subs := make([]Communicator, 3)
	run(t, comms, func(r int, c Communicator) error {
		color := 0
		if r == 1 {
			color = NoColor
		}
		var err error
		subs[r], err = c.Split(context.Background(), color, -r) // descending keys reverse the order
		return err
	})
	require.Nil(t, subs[1], "NoColor gets no communicator")
	require.Equal(t, 1, subs[0].Rank())
	require.Equal(t, 0, subs[2].Rank())
	bufs := [][]float32{{1}, nil, {0}}
	errs := eachRank(3, func(r int) error {
		if subs[r] == nil {
			return nil
		}
		defer subs[r].Close()
		return subs[r].Broadcast(context.Background(), bufs[r], 0) // root 0 is old rank 2
	})
	require.NoError(t, cmpErr(errs...))
	assert.Equal(t, []float32{0}, bufs[0])

	// A duplicate: every rank with one color is a second stream on the same ranks.
	dups := make([]Communicator, 3)
	run(t, comms, func(r int, c Communicator) error {
		var err error
		dups[r], err = c.Split(context.Background(), 0, 0)
		return err
	})
	run(t, dups, func(r int, c Communicator) error {
		defer c.Close()
		if c.Rank() != r {
			return fmt.Errorf("duplicate has rank %d for old rank %d", c.Rank(), r)
		}
		return c.Barrier(context.Background())
	})
}

func TestStats(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testStats(t, tr) })
	}
}

// testStats checks the byte counts, which are the ring's schedule on either
// transport (shared memory counts the bytes the ring would move).
func testStats(t *testing.T, tr string) {
	const size, n = 3, 1000
	comms := newGroup(t, size, Options{Transport: tr})
	run(t, comms, func(r int, c Communicator) error {
		dst := make([]float32, n*size)
		if err := c.AllGather(context.Background(), dst, make([]float32, n)); err != nil {
			return err
		}
		if err := c.ReduceScatter(context.Background(), make([]float32, n), dst, Sum); err != nil {
			return err
		}
		return c.AllReduce(context.Background(), make([]float32, n*size), Average)
	})
	for r, c := range comms {
		s := c.Stats()
		// Ring algorithms move (size-1)/size of the buffer each way, twice for all-reduce.
		perStep := int64(4 * n)
		assert.Equal(t, OpStats{Calls: 1, BytesSent: perStep * (size - 1), BytesReceived: perStep * (size - 1), Time: s.AllGather.Time}, s.AllGather, "rank %d", r)
		assert.Equal(t, perStep*(size-1), s.ReduceScatter.BytesSent)
		assert.Equal(t, 2*perStep*(size-1), s.AllReduce.BytesSent)
		assert.Equal(t, 2*perStep*(size-1), s.AllReduce.BytesReceived)
		assert.Positive(t, s.AllGather.Time)
		assert.Positive(t, s.BufferBytes)
		twice := s.Add(s)
		assert.Equal(t, 2*s.AllReduce.BytesSent, twice.AllReduce.BytesSent)
		assert.Equal(t, int64(2), twice.AllGather.Calls)
	}
}

func TestInvalidArguments(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testInvalidArguments(t, tr) })
	}
}

func testInvalidArguments(t *testing.T, tr string) {
	comms := newGroup(t, 2, Options{Transport: tr})
	c := comms[0]
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"all_gather dst", c.AllGather(ctx, make([]float32, 3), make([]float32, 2)), "dst has 3 elements, want len(src)×size = 2×2 = 4"},
		{"reduce_scatter src", c.ReduceScatter(ctx, make([]float32, 2), make([]float32, 3), Sum), "src has 3 elements, want len(dst)×size = 2×2 = 4"},
		{"op", c.AllReduce(ctx, nil, Op(7)), "unknown reduction Op(7)"},
		{"root", c.Broadcast(ctx, nil, 2), "root 2 is not a rank of this group of 2"},
		{"color", func() error { _, err := c.Split(ctx, -5, 0); return err }(), "color -5 is negative"},
	} {
		assert.ErrorContains(t, tt.err, tt.want, tt.name)
	}
	// Argument errors are local: the communicator still works.
	run(t, comms, func(r int, c Communicator) error { return c.Barrier(ctx) })
}

func TestClosedCommunicator(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testClosedCommunicator(t, tr) })
	}
}

func testClosedCommunicator(t *testing.T, tr string) {
	comms := newGroup(t, 2, Options{Transport: tr})
	for _, c := range comms {
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "Close is idempotent")
		assert.ErrorIs(t, c.Barrier(context.Background()), ErrClosed)
		_, err := c.Split(context.Background(), 0, 0)
		assert.ErrorIs(t, err, ErrClosed)
	}
}

func TestDialWorldOfOne(t *testing.T) {
	c, err := Dial(context.Background(), rendezvousInfo(0, 1, 0), Options{})
	require.NoError(t, err)
	defer c.Close()
	buf := []float32{1, 2}
	require.NoError(t, c.AllReduce(context.Background(), buf, Average))
	assert.Equal(t, []float32{1, 2}, buf)
	dst := make([]float32, 2)
	require.NoError(t, c.ReduceScatter(context.Background(), dst, []float32{3, 4}, Sum))
	assert.Equal(t, []float32{3, 4}, dst)
	sub, err := c.Split(context.Background(), 0, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, sub.Size())
	require.NoError(t, sub.Barrier(context.Background()))
}

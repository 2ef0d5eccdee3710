package comm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// testTimeout bounds every collective in tests: a hang fails fast instead of
// stalling the package.
const testTimeout = 20 * time.Second

// newGroup opens a world of size ranks in this process, on one node: over
// loopback or shared memory, as opts.Transport says.
func newGroup(t testing.TB, size int, opts Options) []Communicator {
	t.Helper()
	return newGroupOnNodes(t, size, size, opts)
}

// newGroupOnNodes is newGroup with perNode consecutive ranks on each (pretend) node.
func newGroupOnNodes(t testing.TB, size, perNode int, opts Options) []Communicator {
	t.Helper()
	if opts.OpTimeout == 0 {
		opts.OpTimeout = testTimeout
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = testTimeout
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		_, err := rendezvous.Server{WorldSize: size, Timeout: opts.ConnectTimeout}.Serve(context.Background(), ln)
		served <- err
	}()
	comms := make([]Communicator, size)
	errs := eachRank(size, func(r int) error {
		var err error
		o := opts
		o.Host = "testhost"
		o.Node = fmt.Sprintf("testnode%d", r/perNode)
		comms[r], err = Join(context.Background(), ln.Addr().String(), r, size, o)
		return err
	})
	require.NoError(t, <-served)
	for _, err := range errs {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	if size > 1 {
		switch {
		case opts.Transport == TransportTCP || perNode < size:
			require.IsType(t, &ring{}, comms[0])
		default:
			require.IsType(t, &shm{}, comms[0])
		}
	}
	return comms
}

// eachRank runs f for every rank concurrently and returns the errors by rank.
func eachRank(size int, f func(r int) error) []error {
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// run runs f on every communicator concurrently and requires success.
func run(t testing.TB, comms []Communicator, f func(r int, c Communicator) error) {
	t.Helper()
	for r, err := range eachRank(len(comms), func(r int) error { return f(r, comms[r]) }) {
		require.NoError(t, err, "rank %d", r)
	}
}

// rankData is rank r's deterministic input of n elements in [-1, 1).
func rankData(r, n int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, uint64(n)))
	out := make([]float32, n)
	for i := range out {
		out[i] = 2*rng.Float32() - 1
	}
	return out
}

// ringSum is the documented reduction order for a segment owned by rank j of size
// ranks: ((x[j+1] + x[j+2]) + ...) + x[j].
func ringSum(inputs [][]float32, owner, i int) float32 {
	size := len(inputs)
	if size == 1 {
		return inputs[0][i]
	}
	acc := inputs[mod(owner+1, size)][i]
	for k := 2; k <= size; k++ {
		acc = inputs[mod(owner+k, size)][i] + acc
	}
	return acc
}

// seqSum is the plain sum over ranks 0..size-1 in float64.
func seqSum(inputs [][]float32, i int) float64 {
	var s float64
	for _, in := range inputs {
		s += float64(in[i])
	}
	return s
}

// requireClose checks got against a float64 reference within a relative tolerance
// suited to a few float32 additions.
func requireClose(t testing.TB, want []float64, got []float32, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i, w := range want {
		tol := 8e-6 * max(1, w, -w)
		if d := float64(got[i]) - w; d > tol || -d > tol {
			require.InDelta(t, w, got[i], tol, "%s: element %d", msg, i)
		}
	}
}

// segBounds is AllReduce's cut of length n into size segments.
func segBounds(n, size, j int) (int, int) {
	base, rem := n/size, n%size
	start := j*base + min(j, rem)
	end := start + base
	if j < rem {
		end++
	}
	return start, end
}

// rendezvousInfo is a torchrun-style Info on loopback.
func rendezvousInfo(rank, size, port int) rendezvous.Info {
	return rendezvous.Info{Source: rendezvous.SourceTorchrun, Rank: rank, WorldSize: size, LocalRank: rank,
		LocalWorldSize: size, MasterAddr: "127.0.0.1", MasterPort: port}
}

// requireSame checks got is bitwise want, reporting the first difference (testify's
// Equal on a million elements is slow under the race detector).
func requireSame(t testing.TB, want, got []float32, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	if bytes.Equal(floatBytes(want), floatBytes(got)) {
		return
	}
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			require.Equal(t, want[i], got[i], "%s: element %d of %d", msg, i, len(want))
		}
	}
}

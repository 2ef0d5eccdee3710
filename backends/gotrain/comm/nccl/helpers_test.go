//go:build cgo

package nccl

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl/ncclfake"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// testTimeout bounds collectives in tests, so a hang fails fast.
const testTimeout = 20 * time.Second

// fakePath is the fake libnccl.so.2 that TestMain built.
var fakePath string

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		os.Exit(worker(mode))
	}
	dir, err := os.MkdirTemp("", "fakenccl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakePath, err = ncclfake.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(dynload.NCCL.EnvVar, fakePath)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
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

// tcpGroup opens a TCP world of size ranks in this process over loopback.
func tcpGroup(t testing.TB, size int, opts comm.Options) []comm.Communicator {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		_, err := rendezvous.Server{WorldSize: size, Timeout: testTimeout}.Serve(context.Background(), ln)
		served <- err
	}()
	comms := make([]comm.Communicator, size)
	errs := eachRank(size, func(r int) error {
		var err error
		o := opts
		o.Host, o.ConnectTimeout = "testhost", testTimeout
		if o.OpTimeout == 0 {
			o.OpTimeout = testTimeout
		}
		comms[r], err = comm.Join(context.Background(), ln.Addr().String(), r, size, o)
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
	return comms
}

// ncclGroup opens an NCCL world of size ranks in this process over the fake.
func ncclGroup(t testing.TB, size int, opts Options) []*Communicator {
	t.Helper()
	lib, err := Load()
	require.NoError(t, err)
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	ctls := tcpGroup(t, size, comm.Options{OpTimeout: opts.withTimeoutDefaults().controlTimeout()})
	world := make([]int, size)
	for i := range world {
		world[i] = i
	}
	comms := make([]*Communicator, size)
	errs := eachRank(size, func(r int) error {
		var err error
		comms[r], err = New(context.Background(), ctls[r], lib, world, opts)
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// withTimeoutDefaults fills the defaults of a test's options.
func (o Options) withTimeoutDefaults() Options {
	o, _ = o.withDefaults()
	return o
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

// requireSame checks got is bitwise want, reporting the first difference.
func requireSame(t testing.TB, want, got []float32, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			require.Equal(t, want[i], got[i], "%s: element %d of %d", msg, i, len(want))
		}
	}
}

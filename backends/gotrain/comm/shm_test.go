package comm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// shmTestDir is a fresh directory on /dev/shm for one test's segments, so that
// what a test leaves behind is visible and no other test's segments are in it.
func shmTestDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(DefaultShmDir, "fsdpbench-test-")
	require.NoError(t, err, "the shared-memory tests need a writable /dev/shm")
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// requireNoSegments checks that no segment file is left in dir.
func requireNoSegments(t testing.TB, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "segment files left in %s", dir)
}

// TestShmBitwiseAsRing runs the same reductions through the TCP ring and shared
// memory and requires bitwise equal results: a run's losses do not depend on the
// transport.
func TestShmBitwiseAsRing(t *testing.T) {
	for _, size := range []int{2, 3, 4} {
		for _, chunk := range []int{64, 1 << 20} {
			t.Run(fmt.Sprintf("ws%d-chunk%d", size, chunk), func(t *testing.T) {
				const n = 10_007
				results := map[string][][]float32{}
				for _, tr := range transports {
					comms := newGroup(t, size, Options{Transport: tr, ChunkBytes: chunk})
					bufs := inputs(size, n*size)
					rs := make([][]float32, size)
					avg := inputs(size, n*size+1)
					run(t, comms, func(r int, c Communicator) error {
						rs[r] = make([]float32, n)
						if err := c.ReduceScatter(context.Background(), rs[r], bufs[r], Average); err != nil {
							return err
						}
						if err := c.AllReduce(context.Background(), bufs[r], Sum); err != nil {
							return err
						}
						return c.AllReduce(context.Background(), avg[r], Average)
					})
					results[tr] = append(append(rs, bufs...), avg...)
				}
				for i := range results[TransportTCP] {
					requireSame(t, results[TransportTCP][i], results[TransportShm][i], fmt.Sprintf("result %d", i))
				}
			})
		}
	}
}

// TestShmLeavesNothingBehind checks that segments have no name once set up (the
// world's and a Split's), and that setting one up removes the stale segments of
// ranks that died during their setup but keeps those still held.
func TestShmLeavesNothingBehind(t *testing.T) {
	dir := shmTestDir(t)
	stale := filepath.Join(dir, segPrefix+"stale")
	require.NoError(t, os.WriteFile(stale, []byte("left by a killed rank 0"), 0o600))
	held := filepath.Join(dir, segPrefix+"held")
	require.NoError(t, os.WriteFile(held, nil, 0o600))
	fd, err := unix.Open(held, unix.O_RDWR, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	_, err = lockByte(fd, unix.F_OFD_SETLK, 3, 1) // a rank of a group still setting up
	require.NoError(t, err)
	other := filepath.Join(dir, "not-ours")
	require.NoError(t, os.WriteFile(other, nil, 0o600))

	comms := newGroup(t, 3, Options{Transport: TransportShm, ShmDir: dir})
	assert.NoFileExists(t, stale)
	assert.FileExists(t, held)
	assert.FileExists(t, other)
	require.NoError(t, os.Remove(held))
	require.NoError(t, os.Remove(other))
	requireNoSegments(t, dir)

	subs := make([]Communicator, 3)
	run(t, comms, func(r int, c Communicator) error {
		var err error
		subs[r], err = c.Split(context.Background(), 0, 0)
		return err
	})
	require.IsType(t, &shm{}, subs[0])
	requireNoSegments(t, dir)
	run(t, subs, func(r int, c Communicator) error { return c.Barrier(context.Background()) })
	for _, c := range subs {
		require.NoError(t, c.Close())
	}
}

func TestShmSetupErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
		want string
	}{
		{"no such directory", Options{Transport: TransportShm, ShmDir: "/nonexistent/shm"}, "set the transport to tcp"},
		{"unknown transport", Options{Transport: "rdma"}, `transport "rdma" is not one of [auto shm tcp]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.ConnectTimeout = testTimeout
			port := freePort(t)
			errs := eachRank(2, func(r int) error {
				c, err := Dial(context.Background(), rendezvousInfo(r, 2, port), opts)
				if err == nil {
					c.Close()
				}
				return err
			})
			require.Error(t, errs[0])
			assert.Contains(t, errs[0].Error(), tt.want)
		})
	}
	t.Run("shm across nodes", func(t *testing.T) {
		port := freePort(t)
		errs := eachRank(2, func(r int) error {
			info := rendezvousInfo(r, 2, port)
			info.NodeRank = r
			c, err := Dial(context.Background(), info, Options{Transport: TransportShm, ConnectTimeout: testTimeout})
			if err == nil {
				c.Close()
			}
			return err
		})
		for _, err := range errs {
			require.Error(t, err)
			assert.Contains(t, err.Error(), "transport shm needs every rank on one node")
			assert.True(t, strings.Contains(err.Error(), "/node1"), err.Error())
		}
	})
}

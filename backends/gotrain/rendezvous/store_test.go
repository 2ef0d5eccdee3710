package rendezvous

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve starts a store for size ranks on loopback and returns its address and result.
func serve(t *testing.T, size int, timeout time.Duration) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := Server{WorldSize: size, Timeout: timeout}.Serve(context.Background(), ln)
		done <- err
	}()
	return ln.Addr().String(), done
}

// join registers the given ranks concurrently and returns their tables and errors.
func join(addr string, size int, ranks []int, timeout time.Duration) ([]Table, []error) {
	tables := make([]Table, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			c, err := Connect(context.Background(), addr, timeout)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			self := Peer{Rank: r, Host: fmt.Sprintf("host%d", r), Addr: fmt.Sprintf("10.0.0.%d:%d", r, 1000+r)}
			tables[i], errs[i] = c.Exchange(context.Background(), self, size)
		})
	}
	wg.Wait()
	return tables, errs
}

func TestStoreExchange(t *testing.T) {
	for _, size := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			addr, done := serve(t, size, 10*time.Second)
			ranks := make([]int, size)
			for i := range ranks {
				ranks[i] = size - 1 - i // join in reverse order: the table is still by rank
			}
			tables, errs := join(addr, size, ranks, 10*time.Second)
			require.NoError(t, <-done)
			for i := range ranks {
				require.NoError(t, errs[i])
				require.Len(t, tables[i].Peers, size)
				assert.Equal(t, tables[0], tables[i], "every rank gets the same table")
				assert.NotEmpty(t, tables[i].ID)
				for r, p := range tables[i].Peers {
					assert.Equal(t, Peer{Rank: r, Host: fmt.Sprintf("host%d", r), Addr: fmt.Sprintf("10.0.0.%d:%d", r, 1000+r)}, p)
				}
			}
		})
	}
}

func TestStoreTimeoutNamesMissingRanks(t *testing.T) {
	addr, done := serve(t, 4, 300*time.Millisecond)
	start := time.Now()
	_, errs := join(addr, 4, []int{0, 1}, 10*time.Second)
	serr := <-done
	require.Error(t, serr)
	assert.Contains(t, serr.Error(), "rendezvous timed out after 300ms: ranks 2, 3 of 4 never connected to "+addr)
	for _, err := range errs {
		require.Error(t, err)
		assert.Contains(t, err.Error(), "ranks 2, 3 of 4 never connected", "the waiting ranks learn which ranks are missing")
	}
	assert.Less(t, time.Since(start), 5*time.Second)

	addr, done = serve(t, 3, 200*time.Millisecond)
	_, _ = join(addr, 3, []int{0, 2}, 10*time.Second)
	assert.ErrorContains(t, <-done, "rank 1 of 3 never connected")
}

func TestStoreRefusesInconsistentRanks(t *testing.T) {
	t.Run("duplicate", func(t *testing.T) {
		addr, done := serve(t, 3, 10*time.Second)
		_, errs := join(addr, 3, []int{1, 1}, 10*time.Second)
		err := <-done
		assert.ErrorContains(t, err, "rank 1 joined twice")
		assert.ErrorContains(t, err, "distinct RANK")
		for _, e := range errs {
			assert.Error(t, e)
		}
	})
	t.Run("world size", func(t *testing.T) {
		addr, done := serve(t, 3, 10*time.Second)
		_, errs := join(addr, 2, []int{1}, 10*time.Second)
		assert.ErrorContains(t, <-done, "has world size 2 but rank 0 has 3")
		assert.ErrorContains(t, errs[0], "world size")
	})
	t.Run("rank out of range", func(t *testing.T) {
		addr, done := serve(t, 2, 10*time.Second)
		_, _ = join(addr, 2, []int{5}, 10*time.Second)
		assert.ErrorContains(t, <-done, "rank 5, outside 0..1")
	})
}

func TestStoreIgnoresStrayConnections(t *testing.T) {
	addr, done := serve(t, 2, 10*time.Second)
	stray, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = stray.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	require.NoError(t, err)
	_, errs := join(addr, 2, []int{0, 1}, 10*time.Second)
	require.NoError(t, <-done)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	stray.Close()
}

func TestConnectWithoutStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nobody serves here
	start := time.Now()
	_, err = Connect(context.Background(), addr, 300*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "could not reach the store at "+addr+" within 300ms")
	assert.Contains(t, err.Error(), "is rank 0 running")
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestConnectWaitsForLateStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	done := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond) // rank 0 starts late
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			done <- err
			return
		}
		_, err = Server{WorldSize: 1, Timeout: 10 * time.Second}.Serve(context.Background(), ln)
		done <- err
	}()
	tables, errs := join(addr, 1, []int{0}, 10*time.Second)
	require.NoError(t, <-done)
	require.NoError(t, errs[0])
	assert.Len(t, tables[0].Peers, 1)
}

func TestServeCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Server{WorldSize: 2, Timeout: time.Minute}.Serve(ctx, ln)
		done <- err
	}()
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "ranks 0, 1 of 2")
}

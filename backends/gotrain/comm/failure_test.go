package comm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requirePeerError checks that err names the failed world rank.
func requirePeerError(t *testing.T, err error, rank int, msg string) *PeerError {
	t.Helper()
	var pe *PeerError
	require.ErrorAs(t, err, &pe, msg)
	require.Equal(t, rank, pe.Rank, "%s: %v", msg, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("rank %d", rank))
	assert.Contains(t, err.Error(), "testhost", "the error names the peer's host")
	return pe
}

// transports are the data paths every behaviour test runs on.
var transports = []string{TransportTCP, TransportShm}

func TestPeerFailsMidCollective(t *testing.T) {
	for _, tr := range transports {
		for _, how := range []string{"dies", "cancels"} {
			for _, size := range []int{2, 4} {
				t.Run(fmt.Sprintf("%s/%s/ws%d", tr, how, size), func(t *testing.T) {
					testPeerFailsMidCollective(t, tr, how, size)
				})
			}
		}
	}
}

func testPeerFailsMidCollective(t *testing.T, tr, how string, size int) {
	const victim = 1
	comms := newGroup(t, size, Options{ChunkBytes: 64 << 10, Transport: tr})
	ctxs := make([]context.Context, size)
	for r := range ctxs {
		ctxs[r] = context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if how == "cancels" {
		ctxs[victim] = ctx
	}
	started := make(chan struct{}, size)
	failedAt := make(chan time.Time, 1)
	go func() {
		for range size {
			<-started
		}
		time.Sleep(20 * time.Millisecond)
		failedAt <- time.Now()
		if how == "dies" {
			comms[victim].Close() // to its peers, the same as the process dying: its sockets close
		} else {
			cancel()
		}
	}()
	ended := make([]time.Time, size)
	errs := eachRank(size, func(r int) error {
		buf := rankData(r, 1<<18)
		started <- struct{}{}
		for {
			if err := comms[r].AllReduce(ctxs[r], buf, Sum); err != nil {
				ended[r] = time.Now()
				return err
			}
		}
	})
	at := <-failedAt
	for r, err := range errs {
		if r == victim {
			if how == "dies" {
				assert.ErrorIs(t, err, ErrClosed)
			} else {
				assert.ErrorIs(t, err, context.Canceled)
			}
			continue
		}
		pe := requirePeerError(t, err, victim, fmt.Sprintf("rank %d", r))
		if how == "cancels" {
			assert.Contains(t, pe.Reason, "gave up on the collective: context canceled")
		}
		assert.Less(t, ended[r].Sub(at), 5*time.Second, "rank %d noticed within seconds", r)
		// The communicator is now unusable, and says why.
		err = comms[r].Barrier(context.Background())
		requirePeerError(t, err, victim, "later call")
		assert.Contains(t, err.Error(), "unusable after an earlier failure")
	}
}

func TestHungPeerTimesOut(t *testing.T) {
	for _, tr := range transports {
		for _, tt := range []struct{ size, hung int }{{2, 1}, {3, 2}, {4, 3}, {4, 1}} {
			t.Run(fmt.Sprintf("%s/ws%d-hung%d", tr, tt.size, tt.hung), func(t *testing.T) {
				comms := newGroup(t, tt.size, Options{OpTimeout: 300 * time.Millisecond, Transport: tr})
				detector := mod(tt.hung+1, tt.size)
				start := time.Now()
				errs := eachRank(tt.size, func(r int) error {
					if r == tt.hung {
						return nil // never joins the collective
					}
					return comms[r].AllReduce(context.Background(), rankData(r, 100), Sum)
				})
				reporters := map[int]bool{}
				for r, err := range errs {
					if r == tt.hung {
						continue
					}
					pe := requirePeerError(t, err, tt.hung, fmt.Sprintf("rank %d", r))
					reporters[pe.ReportedBy] = true
					if tr == TransportTCP {
						assert.Equal(t, detector, pe.ReportedBy, "the rank after the hung one noticed, and its abort frame told the others")
						assert.Contains(t, pe.Reason, fmt.Sprintf("sent rank %d nothing for 300ms", detector))
					} else {
						// Every rank waits on the hung one directly: the first to time out
						// posts the failure, and the others report that record.
						assert.NotEqual(t, tt.hung, pe.ReportedBy)
						assert.Contains(t, pe.Reason, fmt.Sprintf("did nothing in the collective for 300ms while rank %d waited for it", pe.ReportedBy))
					}
				}
				assert.Len(t, reporters, 1, "every rank reports the same failure")
				assert.Less(t, time.Since(start), 5*time.Second)
			})
		}
	}
}

func TestCancelledRankAbortsPeers(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testCancelledRankAbortsPeers(t, tr) })
	}
}

func testCancelledRankAbortsPeers(t *testing.T, tr string) {
	comms := newGroup(t, 2, Options{Transport: tr})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := comms[1].AllReduce(ctx, rankData(1, 1000), Sum) // rank 0 is not there yet
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "all_reduce #1 on rank 1")

	start := time.Now()
	err = comms[0].AllReduce(context.Background(), rankData(0, 1000), Sum)
	pe := requirePeerError(t, err, 1, "rank 0")
	assert.Contains(t, pe.Reason, "gave up on the collective")
	assert.Less(t, time.Since(start), 2*time.Second, "the abort frame was waiting; no timeout needed")
}

func TestDesynchronisedRanks(t *testing.T) {
	type call func(c Communicator) error
	allGather := func(n int) call {
		return func(c Communicator) error {
			return c.AllGather(context.Background(), make([]float32, n*c.Size()), make([]float32, n))
		}
	}
	allReduce := func(n int, op Op) call {
		return func(c Communicator) error { return c.AllReduce(context.Background(), make([]float32, n), op) }
	}
	broadcast := func(root int) call {
		return func(c Communicator) error { return c.Broadcast(context.Background(), make([]float32, 4), root) }
	}
	tests := []struct {
		name  string
		calls []call // by rank
	}{
		{"different collectives", []call{allGather(4), allReduce(8, Sum)}},
		{"different lengths", []call{allReduce(10, Sum), allReduce(12, Sum)}},
		{"same frames, different totals", []call{allGather(4), allGather(8)}}, // 16-byte frames either way
		{"different ops", []call{allReduce(4, Sum), allReduce(4, Average)}},
		{"different roots", []call{broadcast(0), broadcast(1), broadcast(0)}},
	}
	for _, tr := range transports {
		for _, tt := range tests {
			t.Run(tr+"/"+tt.name, func(t *testing.T) {
				size := len(tt.calls)
				comms := newGroup(t, size, Options{ChunkBytes: 16, OpTimeout: 5 * time.Second, Transport: tr})
				start := time.Now()
				errs := eachRank(size, func(r int) error {
					if err := tt.calls[r](comms[r]); err != nil {
						return err
					}
					// A rank that only sent may finish before anyone notices; its next
					// collective finds out.
					return comms[r].Barrier(context.Background())
				})
				for r, err := range errs {
					var pe *PeerError
					require.ErrorAs(t, err, &pe, "rank %d", r)
					assert.Contains(t, err.Error(), "is out of step with rank", "rank %d", r)
					assert.Contains(t, err.Error(), "same collectives in the same order with the same sizes", "rank %d", r)
				}
				assert.Less(t, time.Since(start), 3*time.Second, "detected from the headers, not by a timeout")
			})
		}
	}
}

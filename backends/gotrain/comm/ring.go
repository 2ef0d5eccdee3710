package comm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// ring is the TCP ring communicator: each rank writes only to rank+1 (next) and reads
// only from rank-1 (prev). Every collective is a schedule of steps; in each step a
// rank sends one segment of the buffer and receives another, as frames of at most
// Options.ChunkBytes. A sender goroutine and the calling goroutine (the receiver)
// run the schedule concurrently, so frames stream in both directions at once and a
// frame received in step s is forwarded in step s+1 as soon as it has arrived
// (pipelining), without waiting for the rest of its segment.
type ring struct {
	rank, size int
	peers      []rendezvous.Peer // by group rank; Peer.Rank is the world rank
	id         string            // the group's identity in ring handshakes
	listenIP   string            // where this rank listens, for Split's new rings
	opts       Options

	next, prev net.Conn // nil when size == 1
	w          *bufio.Writer
	r          *bufio.Reader
	sendCodec  *codec // owned by the sender goroutine
	recvCodec  *codec // owned by the receiver

	mu      sync.Mutex // one collective at a time; guards everything below
	seq     uint64
	broken  error // the first failure; the communicator is unusable after it
	sends   []sendItem
	recvs   []recvItem
	spans   []stepSpans
	stage   []float32 // received frames before they are added to a partial sum
	scratch []float32 // reduce-scatter's partial sums
	hdrW    [headerLen]byte
	hdrR    [headerLen]byte

	bgMu   sync.Mutex // orders Close against starting background drains
	closed bool
	bg     sync.WaitGroup

	statsMu sync.Mutex
	stats   Stats
}

// sendItem is one frame to send.
type sendItem struct {
	data  []float32
	after int // receive items that must have completed first (the data arrives in them)
}

// recvItem is one frame to receive.
type recvItem struct {
	dst   []float32
	own   []float32 // non-nil: dst = received + own
	scale bool      // then divide by the size (Average, on the segment's owner)
	after int       // send items that must have completed first (they read dst's old contents)
}

// step is one step of a schedule, before it is cut into frames.
type step struct {
	hasSend   bool
	send      []float32
	sendAfter int // the step whose receives produce this step's send data; -1 none

	hasRecv   bool
	recv      []float32
	own       []float32
	scale     bool
	recvAfter int // the step whose sends must be done before recv is overwritten; -1 none
}

type span struct{ start, n int }

type stepSpans struct{ send, recv span }

// after is the count of items of sp that must be complete for frame k of a segment of
// the same length to proceed: through frame k of sp.
func (sp span) after(k int) int {
	if sp.n == 0 {
		return 0
	}
	return sp.start + min(k, sp.n-1) + 1
}

func mod(a, n int) int { return ((a % n) + n) % n }

// Rank implements Communicator.
func (c *ring) Rank() int { return c.rank }

// Size implements Communicator.
func (c *ring) Size() int { return c.size }

// worldRank is this rank's rank in the job, for messages.
func (c *ring) worldRank() int { return c.peers[c.rank].Rank }

// AllGather implements Communicator.
func (c *ring) AllGather(ctx context.Context, dst, src []float32) error {
	n, size := len(src), c.size
	if len(dst) != n*size {
		return fmt.Errorf("comm: all_gather: dst has %d elements, want len(src)×size = %d×%d = %d", len(dst), n, size, n*size)
	}
	return c.collective(ctx, KindAllGather, uint64(len(dst)), 0, func() []step {
		seg := func(j int) []float32 { j = mod(j, size); return dst[j*n : (j+1)*n] }
		copy(seg(c.rank), src)
		steps := make([]step, size-1)
		for s := range steps {
			steps[s] = step{
				hasSend: true, send: seg(c.rank - s), sendAfter: s - 1,
				hasRecv: true, recv: seg(c.rank - s - 1), recvAfter: -1,
			}
		}
		return steps
	})
}

// ReduceScatter implements Communicator.
func (c *ring) ReduceScatter(ctx context.Context, dst, src []float32, op Op) error {
	n, size := len(dst), c.size
	if len(src) != n*size {
		return fmt.Errorf("comm: reduce_scatter: src has %d elements, want len(dst)×size = %d×%d = %d", len(src), n, size, n*size)
	}
	if err := op.validate(); err != nil {
		return err
	}
	return c.collective(ctx, KindReduceScatter, uint64(len(src)), uint32(op), func() []step {
		seg := func(j int) []float32 { j = mod(j, size); return src[j*n : (j+1)*n] }
		if size == 1 {
			copy(dst, src)
			return nil
		}
		if size > 2 {
			c.scratch = grow(c.scratch, n)
		}
		// Partial sums alternate between dst and scratch, ending in dst: step s's
		// result is read by step s+1's sends while step s+1 receives into the other.
		partial := func(s int) []float32 {
			if (size-2-s)%2 == 0 {
				return dst
			}
			return c.scratch[:n]
		}
		steps := make([]step, size-1)
		for s := range steps {
			st := step{
				hasSend: true, sendAfter: s - 1,
				hasRecv: true, recv: partial(s), own: seg(c.rank - s - 2),
				scale: s == size-2 && op == Average, recvAfter: s - 1,
			}
			if s == 0 {
				st.send = seg(c.rank - 1)
			} else {
				st.send = partial(s - 1)
			}
			if s < 2 {
				st.recvAfter = -1
			}
			steps[s] = st
		}
		return steps
	})
}

// AllReduce implements Communicator: a reduce-scatter then an all-gather around the
// ring, in place; buf is cut into size segments whose lengths differ by at most one.
func (c *ring) AllReduce(ctx context.Context, buf []float32, op Op) error {
	if err := op.validate(); err != nil {
		return err
	}
	size := c.size
	return c.collective(ctx, KindAllReduce, uint64(len(buf)), uint32(op), func() []step {
		if size == 1 {
			return nil
		}
		base, rem := len(buf)/size, len(buf)%size
		seg := func(j int) []float32 {
			j = mod(j, size)
			start := j*base + min(j, rem)
			end := start + base
			if j < rem {
				end++
			}
			return buf[start:end]
		}
		steps := make([]step, 2*(size-1))
		for s := 0; s < size-1; s++ { // reduce-scatter: rank r ends with segment r summed
			own := seg(c.rank - s - 2)
			steps[s] = step{
				hasSend: true, send: seg(c.rank - s - 1), sendAfter: s - 1,
				hasRecv: true, recv: own, own: own, scale: s == size-2 && op == Average, recvAfter: -1,
			}
		}
		for t := 0; t < size-1; t++ { // all-gather of the summed segments
			steps[size-1+t] = step{
				hasSend: true, send: seg(c.rank - t), sendAfter: size - 2 + t,
				// The segment received here was sent in reduce-scatter step t; the
				// explicit dependency keeps its old contents until then.
				hasRecv: true, recv: seg(c.rank - t - 1), recvAfter: t,
			}
		}
		return steps
	})
}

// Broadcast implements Communicator: a pipelined chain root → root+1 → … → root-1.
func (c *ring) Broadcast(ctx context.Context, buf []float32, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("comm: broadcast: root %d is not a rank of this group of %d", root, c.size)
	}
	return c.collective(ctx, KindBroadcast, uint64(len(buf)), uint32(root), func() []step {
		if c.size == 1 {
			return nil
		}
		d := mod(c.rank-root, c.size) // distance from the root along the ring
		st := step{sendAfter: -1, recvAfter: -1}
		if d != 0 {
			st.hasRecv, st.recv = true, buf
			st.sendAfter = 0
		}
		if d != c.size-1 {
			st.hasSend, st.send = true, buf
		}
		return []step{st}
	})
}

// Barrier implements Communicator: an all-gather of nothing, whose last frame
// reaches a rank only after every rank has sent its first.
func (c *ring) Barrier(ctx context.Context) error {
	return c.collective(ctx, KindBarrier, 0, 0, func() []step {
		steps := make([]step, c.size-1)
		for s := range steps {
			steps[s] = step{hasSend: true, sendAfter: s - 1, hasRecv: true, recvAfter: -1}
		}
		return steps
	})
}

// Stats implements Communicator.
func (c *ring) Stats() Stats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.stats
}

// Close implements Communicator. It returns after the background drain of a failed
// communicator has stopped.
func (c *ring) Close() error {
	c.bgMu.Lock()
	var err error
	if !c.closed {
		c.closed = true
		if c.next != nil {
			err = errors.Join(c.next.Close(), c.prev.Close())
		}
	}
	c.bgMu.Unlock()
	c.bg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed earlier after a failure
	}
	return err
}

func (c *ring) isClosed() bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	return c.closed
}

func (o Op) validate() error {
	if o != Sum && o != Average {
		return fmt.Errorf("comm: unknown reduction %v (want Sum or Average)", o)
	}
	return nil
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// usable says why no collective may start.
func (c *ring) usable() error {
	if c.isClosed() {
		return ErrClosed
	}
	if c.broken != nil {
		return fmt.Errorf("comm: communicator unusable after an earlier failure (close it): %w", c.broken)
	}
	return nil
}

// collective runs one collective: build lays out the schedule (and does the local
// part, such as copying this rank's own shard), execute moves the frames.
func (c *ring) collective(ctx context.Context, kind Kind, total uint64, aux uint32, build func() []step) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	start := time.Now()
	c.seq++
	seq := c.seq
	c.layout(build())
	err := c.execute(ctx, kind, seq, total, aux)

	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	s := c.stats.Of(kind)
	s.Calls++
	s.Time += time.Since(start)
	if err == nil {
		var sent int64
		for _, it := range c.sends {
			sent += 4 * int64(len(it.data))
		}
		s.BytesSent += sent
		if c.size > 1 && c.peers[(c.rank+1)%c.size].Host != c.peers[c.rank].Host {
			s.BytesSentInterNode += sent // every send goes to the next rank
		}
		for _, it := range c.recvs {
			s.BytesReceived += 4 * int64(len(it.dst))
		}
	}
	c.stats.BufferBytes = max(c.stats.BufferBytes, c.bufferBytes())
	return err
}

// bufferBytes is the staging memory this communicator holds.
func (c *ring) bufferBytes() int64 {
	b := 4 * int64(cap(c.stage)+cap(c.scratch))
	if c.w != nil {
		b += int64(c.w.Size() + c.r.Size())
	}
	if c.sendCodec != nil {
		b += int64(cap(c.sendCodec.stage) + cap(c.recvCodec.stage))
	}
	return b
}

// layout cuts the steps into frames and resolves their dependencies into item counts.
func (c *ring) layout(steps []step) {
	c.sends, c.recvs = c.sends[:0], c.recvs[:0]
	c.spans = append(c.spans[:0], make([]stepSpans, len(steps))...)
	chunk := c.opts.ChunkBytes / 4
	frames := func(seg []float32, emit func(k int, f []float32)) {
		for k, off := 0, 0; ; k, off = k+1, off+chunk {
			end := min(off+chunk, len(seg))
			emit(k, seg[off:end])
			if end == len(seg) {
				return
			}
		}
	}
	depOn := func(s int, pick func(stepSpans) span) span {
		if s < 0 {
			return span{}
		}
		return pick(c.spans[s])
	}
	for s, st := range steps {
		if st.hasRecv {
			gate := depOn(st.recvAfter, func(sp stepSpans) span { return sp.send })
			sp := span{start: len(c.recvs)}
			frames(st.recv, func(k int, f []float32) {
				it := recvItem{dst: f, scale: st.scale, after: gate.after(k)}
				if st.own != nil {
					it.own = st.own[k*chunk : k*chunk+len(f)]
					c.stage = grow(c.stage, max(len(c.stage), len(f)))
				}
				c.recvs = append(c.recvs, it)
			})
			sp.n = len(c.recvs) - sp.start
			c.spans[s].recv = sp
		}
		if st.hasSend {
			gate := depOn(st.sendAfter, func(sp stepSpans) span { return sp.recv })
			sp := span{start: len(c.sends)}
			frames(st.send, func(k int, f []float32) {
				c.sends = append(c.sends, sendItem{data: f, after: gate.after(k)})
			})
			sp.n = len(c.sends) - sp.start
			c.spans[s].send = sp
		}
	}
}

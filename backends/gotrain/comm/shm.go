package comm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// Transports for Options.Transport.
const (
	// TransportAuto uses shared memory for every group whose ranks all share a
	// node, and the TCP ring for a group that spans nodes. The empty string means
	// the same.
	TransportAuto = "auto"
	// TransportShm is TransportAuto that refuses a world spanning nodes, for a run
	// that must measure shared memory.
	TransportShm = "shm"
	// TransportTCP is the TCP ring for every group, loopback within a node.
	TransportTCP = "tcp"
)

// Transports lists Options.Transport's values.
var Transports = []string{TransportAuto, TransportShm, TransportTCP}

func checkTransport(t string) error {
	if t != "" && !slices.Contains(Transports, t) {
		return fmt.Errorf("comm: transport %q is not one of %v", t, Transports)
	}
	return nil
}

// shm is the shared-memory communicator of ranks on one node. Every rank maps one
// segment (shmseg.go) and owns shmDepth buffers in it. A collective is a series
// of rounds; in round g (counted over the communicator's life) every rank
//
//  1. waits until every peer has read round g−shmDepth, which used the same
//     buffer;
//  2. writes its part of the round into its buffer g mod shmDepth, with the
//     collective's header (kind, sequence, size, round, op or root), and
//     publishes g in its written counter;
//  3. waits for every peer's written counter to reach g, checks each peer's
//     header against its own (a rank in another collective, or with another
//     size, op or root, is out of step: the collective fails at once, on every
//     rank), and reads what it needs from the peers' buffers;
//  4. publishes g in its read counter.
//
// So a round moves ChunkBytes per rank (at most shmMaxRoundBytes), and a rank may
// run up to shmDepth rounds ahead of the slowest. Reading peers' buffers in place
// with process_vm_readv (one copy instead of two) was tried and measured: no
// faster at ws 2, slower at ws 4 (every reader pulls a peer's buffer from DRAM,
// where a round in the segment is written once and read by all from the shared
// cache), and it needs ptrace rights, so rounds go through the segment. Waits spin
// briefly, then sleep on the counter with futex, which the publisher wakes.
//
// Reductions follow the TCP ring's order exactly (the package's Numerics): the
// segment owned by rank j is summed as ((x[j+1] + x[j+2]) + ...) + x[j], divided
// once by the size for Average, so results are bitwise the ring's.
//
// An all-gather into a buffer of the segment's shared arena (shmarena.go: FSDP's
// gathered parameters, one physical buffer for the node) copies nothing through
// the rounds: two rounds without data bracket each rank's write of its own piece,
// and in place (every piece written by its owner beforehand: FSDP's zero-copy
// gathers) one round is the whole collective.
//
// Failure is the ring's contract with shared memory instead of frames: a wait
// notices within liveWait a peer whose liveness lock is gone (it died or closed
// its communicator), gives up on a peer that has not moved for Options.OpTimeout,
// and stops at once when ctx ends; the first rank to see a failure posts it in
// the segment's abort record (origin, reporter, reason), which wakes everyone, and
// every rank reports that same record as a *PeerError.
type shm struct {
	rank, size int
	peers      []rendezvous.Peer // by group rank; Peer.Rank is the world rank
	id         string
	opts       Options
	seg        *segment

	mu     sync.Mutex // one collective at a time; guards everything below
	seq    uint64
	rounds uint64
	broken error

	closed atomic.Bool

	statsMu sync.Mutex
	stats   Stats

	arenaMu sync.Mutex // guards arena (allocation runs beside a collective)
	arena   *arena     // this rank's allocator over the segment's shared arena
	// arenaMem is the segment's arena (set once: read without locks).
	arenaMem []float32
}

// Timing of the waits.
const (
	// spinWait is how many times a wait yields before it sleeps: a round's
	// peers are usually microseconds apart.
	spinWait = 50
	// sleepWait bounds one futex sleep, so that ctx and Close are noticed even
	// without a wake-up.
	sleepWait = 50 * time.Millisecond
	// liveWait is how often a waiting rank checks its peers' liveness locks.
	liveWait = 100 * time.Millisecond
)

// shmGroup reports whether peers should communicate through shared memory: more
// than one rank, all on one node, and the transport allows it.
func shmGroup(opts Options, peers []rendezvous.Peer) bool {
	return opts.Transport != TransportTCP && len(peers) > 1 && oneNode(peers)
}

// oneNode reports whether every peer is on the first one's (known) node.
func oneNode(peers []rendezvous.Peer) bool {
	for _, p := range peers {
		if p.Node == "" || p.Node != peers[0].Node {
			return false
		}
	}
	return true
}

// newShm sets up the shared-memory communicator of peers (all on this node).
// peerAlive, when non-nil, tells the setup about members that die before they join.
func newShm(ctx context.Context, rank int, peers []rendezvous.Peer, id string, opts Options, peerAlive func(r int) bool) (*shm, error) {
	size := len(peers)
	if size > maxShmRanks {
		return nil, fmt.Errorf("comm: a shared-memory group of %d ranks is larger than supported (%d); set the transport to tcp", size, maxShmRanks)
	}
	dir := opts.ShmDir
	if dir == "" {
		dir = DefaultShmDir
	}
	arenaBytes, err := arenaBytesFor(opts.ShmArenaBytes)
	if err != nil {
		return nil, err
	}
	seg, err := openSegment(ctx, setup{
		dir: dir, id: id, rank: rank, size: size, slotBytes: slotBytesFor(opts.ChunkBytes, size), arenaBytes: arenaBytes,
		timeout: opts.ConnectTimeout, peerAlive: peerAlive,
		describe: func(r int) string { return peers[r].String() },
	})
	if err != nil {
		return nil, fmt.Errorf("comm: rank %d: %w", peers[rank].Rank, err)
	}
	return &shm{rank: rank, size: size, peers: peers, id: id, opts: opts, seg: seg, arena: newArena(len(seg.arena) * 4), arenaMem: seg.arena}, nil
}

// Rank implements Communicator.
func (c *shm) Rank() int { return c.rank }

// Size implements Communicator.
func (c *shm) Size() int { return c.size }

func (c *shm) worldRank() int { return c.peers[c.rank].Rank }

// Stats implements Communicator. Bytes are those the TCP ring's schedule moves for
// the same collective (nccl-tests' bus bytes), so that comm_bytes_per_step does not
// depend on the transport; BufferBytes is this rank's buffers in the segment.
func (c *shm) Stats() Stats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.stats
}

// Close implements Communicator. A collective in flight on another goroutine ends
// with ErrClosed, and the peers are told at once. Buffers of AllocShared are
// unmapped with the segment: free and stop using them first.
func (c *shm) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if !c.mu.TryLock() {
		c.seg.postAbort(c.rank, c.worldRank(), "closed its communicator in the middle of the collective")
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	c.arenaMu.Lock() // an AllocShared in flight reserves pages through the file
	defer c.arenaMu.Unlock()
	return c.seg.close()
}

// op is one collective in progress.
type shmOp struct {
	ctx      context.Context
	kind     Kind
	seq      uint64
	total    uint64
	aux      uint32
	frame    uint32 // the round within the collective
	lastLive time.Time
}

// faultKind is why a wait ended without its data.
type faultKind int

const (
	faultClosed faultKind = iota + 1
	faultAbort            // a failure posted in the segment
	faultCtx
	faultDead
	faultHung
	faultDesync
)

type shmFault struct {
	kind faultKind
	peer int // group rank
	err  error
}

func (f *shmFault) Error() string {
	return fmt.Sprintf("shm fault %d (peer %d): %v", f.kind, f.peer, f.err)
}

func (c *shm) usable() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.broken != nil {
		return fmt.Errorf("comm: communicator unusable after an earlier failure (close it): %w", c.broken)
	}
	return nil
}

// collective runs body as collective kind, counts it, and turns a fault into the
// caller's error. sent and recv are the ring-equivalent bytes.
func (c *shm) collective(ctx context.Context, kind Kind, total uint64, aux uint32, sent, recv int64, body func(op *shmOp) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	start := time.Now()
	c.seq++
	op := &shmOp{ctx: ctx, kind: kind, seq: c.seq, total: total, aux: aux, lastLive: start}
	var err error
	if c.seg.aborted() { // a peer failed after this rank's last collective
		err = &shmFault{kind: faultAbort}
	} else {
		woken := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { defer close(woken); c.seg.wakeAll() })
		err = body(op)
		if !stop() {
			<-woken // it touches the segment, which Close may unmap once this returns
		}
	}
	if err != nil {
		err = c.fail(op, err)
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	s := c.stats.Of(kind)
	s.Calls++
	s.Time += time.Since(start)
	if err == nil {
		s.BytesSent += sent
		s.BytesReceived += recv
	}
	c.stats.BufferBytes = int64(shmDepth * c.seg.slotBytes)
	return err
}

// exchange runs one round: put fills this rank's buffer (nil: nothing to send),
// take reads the round from every rank's buffer (slot(j)); n is the round's length in
// elements, the same on every rank, checked in the header.
func (c *shm) exchange(op *shmOp, n int, put func(mine []float32), take func(slot func(j int) []float32)) error {
	s := c.seg
	c.rounds++
	g, h := uint32(c.rounds), int(c.rounds%shmDepth)
	if c.rounds > shmDepth {
		for j := range c.size {
			if j != c.rank {
				if err := c.await(op, j, s.ctl(j, cRead), s.ctl(j, cReadSleep), g-shmDepth); err != nil {
					return err
				}
			}
		}
	}
	if put != nil {
		put(s.slot(c.rank, h))
	}
	want := header{kind: op.kind, payload: uint32(4 * n), seq: op.seq, total: op.total, frame: op.frame, aux: op.aux}
	want.put(s.roundHeader(c.rank, h))
	publish(s.ctl(c.rank, cWritten), s.ctl(c.rank, cWrittenSleep), g)
	for j := range c.size {
		if j == c.rank {
			continue
		}
		if err := c.await(op, j, s.ctl(j, cWritten), s.ctl(j, cWrittenSleep), g); err != nil {
			return err
		}
		got, err := parseHeader(s.roundHeader(j, h))
		if err != nil {
			return &shmFault{kind: faultDesync, peer: j, err: err}
		}
		if got != want {
			return &shmFault{kind: faultDesync, peer: j, err: &desyncError{got: got, want: want}}
		}
	}
	if take != nil {
		take(func(j int) []float32 { return s.slot(j, h) })
	}
	publish(s.ctl(c.rank, cRead), s.ctl(c.rank, cReadSleep), g)
	op.frame++
	return nil
}

// await waits until rank j's counter word reaches target.
func (c *shm) await(op *shmOp, j int, word, sleepers *uint32, target uint32) error {
	if reached(atomic.LoadUint32(word), target) {
		return nil
	}
	for range spinWait {
		runtime.Gosched()
		if reached(atomic.LoadUint32(word), target) {
			return nil
		}
	}
	since := time.Now()
	for {
		if err := c.check(op, j, since); err != nil {
			return err
		}
		atomic.AddUint32(sleepers, 1)
		if v := atomic.LoadUint32(word); !reached(v, target) {
			futexWait(word, v, sleepWait)
		}
		atomic.AddUint32(sleepers, ^uint32(0))
		if reached(atomic.LoadUint32(word), target) {
			return nil
		}
	}
}

// check says why a wait for rank j, waiting since since, must end, if it must.
func (c *shm) check(op *shmOp, j int, since time.Time) error {
	if c.closed.Load() {
		return &shmFault{kind: faultClosed}
	}
	if c.seg.aborted() {
		return &shmFault{kind: faultAbort}
	}
	if err := ctxErr(op.ctx); err != nil {
		return &shmFault{kind: faultCtx, err: err}
	}
	now := time.Now()
	if now.Sub(op.lastLive) >= liveWait {
		op.lastLive = now
		for k := range c.size {
			if k != c.rank && !c.seg.alive(k) {
				return &shmFault{kind: faultDead, peer: k}
			}
		}
	}
	if now.Sub(since) >= c.opts.OpTimeout {
		return &shmFault{kind: faultHung, peer: j}
	}
	return nil
}

// fail posts the failure (unless a peer's is there first), marks the communicator
// broken, and returns the caller's error: the posted record as a *PeerError, or
// this rank's own ctx or Close.
func (c *shm) fail(op *shmOp, err error) error {
	var f *shmFault
	if !errors.As(err, &f) {
		f = &shmFault{kind: faultDesync, peer: c.rank, err: err}
	}
	me := c.worldRank()
	switch f.kind {
	case faultClosed:
		return fmt.Errorf("comm: %s #%d: %w", op.kind, op.seq, ErrClosed)
	case faultCtx:
		c.seg.postAbort(c.rank, me, fmt.Sprintf("gave up on the collective: %v", f.err))
		c.broken = fmt.Errorf("comm: %s #%d on rank %d: %w", op.kind, op.seq, me, f.err)
		return c.broken
	case faultDead:
		c.seg.postAbort(f.peer, me, "left in the middle of the collective (the process died, or closed its communicator)")
	case faultHung:
		c.seg.postAbort(f.peer, me, fmt.Sprintf("did nothing in the collective for %v while rank %d waited for it (hung, or issuing a different collective; raise %s if it is only slow)",
			c.opts.OpTimeout, me, c.opts.TimeoutName))
	case faultDesync:
		c.seg.postAbort(f.peer, me, fmt.Sprintf("is out of step with rank %d: %v", me, f.err))
	}
	origin, reporter, reason, ok := c.seg.abortRecord()
	if !ok {
		origin, reporter, reason = f.peer, me, fmt.Sprintf("failed (%v), and the failure record in shared memory is incomplete", f.err)
	}
	if origin < 0 || origin >= c.size {
		origin = f.peer
	}
	p := c.peers[origin]
	pe := &PeerError{Op: op.kind, Seq: op.seq, Rank: p.Rank, GroupRank: origin, Host: p.Host, Addr: p.Addr,
		Reason: reason, ReportedBy: reporter}
	if reporter == me && f.kind == faultDesync {
		pe.Err = f.err
	}
	c.broken = pe
	return pe
}

// rounds cuts n elements into rounds of at most per (at least one round, so that
// an empty collective still synchronizes and checks the headers).
func eachRound(n, per int, f func(off, m int) error) error {
	for off := 0; ; off += per {
		m := min(per, n-off)
		if err := f(off, m); err != nil {
			return err
		}
		if off+m >= n {
			return nil
		}
	}
}

func (c *shm) slotElems() int { return c.seg.slotBytes / 4 }

// AllGather implements Communicator. Into a buffer of AllocShared it is
// AllGatherShared (no copy but this rank's piece; when src is that piece
// already, the in-place one: a barrier). Otherwise it copies through the rounds; src may then be dst's own
// piece (in place), which saves copying that piece back.
func (c *shm) AllGather(ctx context.Context, dst, src []float32) error {
	n, size := len(src), c.size
	if len(dst) != n*size {
		return fmt.Errorf("comm: all_gather: dst has %d elements, want len(src)×size = %d×%d = %d", len(dst), n, size, n*size)
	}
	inPlace := n > 0 && &dst[c.rank*n] == &src[0]
	if _, ok := c.arenaOffset(dst); ok {
		var fill func([]float32)
		if !inPlace {
			fill = func(piece []float32) { copy(piece, src) }
		}
		return c.AllGatherShared(ctx, dst, n, device.F32, fill)
	}
	bus := 4 * int64(n) * int64(size-1)
	return c.collective(ctx, KindAllGather, uint64(len(dst)), 0, bus, bus, func(op *shmOp) error {
		return eachRound(n, c.slotElems(), func(off, m int) error {
			return c.exchange(op, m,
				func(mine []float32) { copy(mine, src[off:off+m]) },
				func(slot func(int) []float32) {
					// This rank's piece too comes from its slot, still in cache,
					// rather than from src again.
					for j := range size {
						if j != c.rank || !inPlace {
							copy(dst[j*n+off:j*n+off+m], slot(j)[:m])
						}
					}
				})
		})
	})
}

// ReduceScatter implements Communicator: each round carries a piece of every
// segment from every rank, and each rank reduces its own segment's piece.
func (c *shm) ReduceScatter(ctx context.Context, dst, src []float32, op Op) error {
	n, size := len(dst), c.size
	if len(src) != n*size {
		return fmt.Errorf("comm: reduce_scatter: src has %d elements, want len(dst)×size = %d×%d = %d", len(src), n, size, n*size)
	}
	if err := op.validate(); err != nil {
		return err
	}
	bus := 4 * int64(n) * int64(size-1)
	return c.collective(ctx, KindReduceScatter, uint64(len(src)), uint32(op), bus, bus, func(sop *shmOp) error {
		return eachRound(n, c.slotElems()/size, func(off, m int) error {
			return c.exchange(sop, m*size,
				func(mine []float32) {
					for k := range size {
						copy(mine[k*m:(k+1)*m], src[k*n+off:k*n+off+m])
					}
				},
				func(slot func(int) []float32) {
					r := c.rank
					reduceInto(dst[off:off+m], size, r, op == Average, func(k int) []float32 { return slot(k)[r*m : (r+1)*m] })
				})
		})
	})
}

// AllReduce implements Communicator, in place, with the ring's segments (lengths
// differing by at most one): each step is two rounds, the first carrying a piece
// of every segment from every rank, of which each rank reduces its own segment's
// piece, and the second carrying the reduced pieces to everyone.
func (c *shm) AllReduce(ctx context.Context, buf []float32, op Op) error {
	if err := op.validate(); err != nil {
		return err
	}
	size, total := c.size, len(buf)
	seg := func(j int) (int, int) {
		base, rem := total/size, total%size
		start := j*base + min(j, rem)
		end := start + base
		if j < rem {
			end++
		}
		return start, end
	}
	var sent, recv int64
	for _, d := range []int{0, 1} {
		lo, hi := seg(mod(c.rank+d, size))
		sent += 4 * int64(total-(hi-lo))
		lo, hi = seg(mod(c.rank-d, size))
		recv += 4 * int64(total-(hi-lo))
	}
	longest := (total + size - 1) / size // segment 0's length
	return c.collective(ctx, KindAllReduce, uint64(total), uint32(op), sent, recv, func(sop *shmOp) error {
		return eachRound(longest, c.slotElems()/size, func(off, m int) error {
			piece := func(j int) (int, int) { // segment j's elements [off, off+m), clipped
				lo, hi := seg(j)
				return min(lo+off, hi), min(lo+off+m, hi)
			}
			me := c.rank
			err := c.exchange(sop, m*size,
				func(mine []float32) {
					for j := range size {
						a, b := piece(j)
						copy(mine[j*m:j*m+b-a], buf[a:b])
					}
				},
				func(slot func(int) []float32) {
					a, b := piece(me)
					reduceInto(buf[a:b], size, me, op == Average, func(k int) []float32 { return slot(k)[me*m : me*m+b-a] })
				})
			if err != nil {
				return err
			}
			return c.exchange(sop, m,
				func(mine []float32) {
					a, b := piece(me)
					copy(mine, buf[a:b])
				},
				func(slot func(int) []float32) {
					for j := range size {
						if j != me {
							a, b := piece(j)
							copy(buf[a:b], slot(j)[:b-a])
						}
					}
				})
		})
	})
}

// reduceInto sets out to the ring-order reduction over the ranks of src(k): for the
// segment owned by rank owner, ((x[owner+1] + x[owner+2]) + ...) + x[owner], each
// addition rounded to float32 as the ring's, the last one divided by the size for
// Average.
func reduceInto(out []float32, size, owner int, avg bool, src func(k int) []float32) {
	for i := 1; i < size; i++ {
		a := out
		if i == 1 {
			a = src(mod(owner+1, size))
		}
		b := src(mod(owner+i+1, size))
		if i == size-1 && avg {
			addDiv(out, a, b, float32(size))
		} else {
			add(out, a, b)
		}
	}
}

// Broadcast implements Communicator: the root writes each round, the others read it.
func (c *shm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("comm: broadcast: root %d is not a rank of this group of %d", root, c.size)
	}
	var sent, recv int64
	if d := mod(c.rank-root, c.size); d != 0 {
		recv = 4 * int64(len(buf))
	}
	if mod(c.rank-root, c.size) != c.size-1 {
		sent = 4 * int64(len(buf))
	}
	return c.collective(ctx, KindBroadcast, uint64(len(buf)), uint32(root), sent, recv, func(op *shmOp) error {
		return eachRound(len(buf), c.slotElems(), func(off, m int) error {
			var put func([]float32)
			if c.rank == root {
				put = func(mine []float32) { copy(mine, buf[off:off+m]) }
			}
			return c.exchange(op, m, put, func(slot func(int) []float32) {
				if c.rank != root {
					copy(buf[off:off+m], slot(root)[:m])
				}
			})
		})
	})
}

// Barrier implements Communicator: one round with no data.
func (c *shm) Barrier(ctx context.Context) error {
	return c.collective(ctx, KindBarrier, 0, 0, 0, 0, func(op *shmOp) error { return c.exchange(op, 0, nil, nil) })
}

// Split implements Communicator: one round carries every rank's (color, key); each
// new group of more than one rank sets up its own segment (its ranks are on this
// node, as the parent's are).
func (c *shm) Split(ctx context.Context, color, key int) (Communicator, error) {
	if color < 0 && color != NoColor {
		return nil, fmt.Errorf("comm: split: color %d is negative (use NoColor to opt out)", color)
	}
	type member struct{ parent, color, key int }
	all := make([]member, c.size)
	var seq uint64
	bus := int64(16 * (c.size - 1))
	err := c.collective(ctx, KindSplit, 0, 0, bus, bus, func(op *shmOp) error {
		seq = op.seq
		return c.exchange(op, 4,
			func(mine []float32) {
				b := unsafe.Slice((*byte)(unsafe.Pointer(&mine[0])), 16)
				binary.LittleEndian.PutUint64(b[0:], uint64(int64(color)))
				binary.LittleEndian.PutUint64(b[8:], uint64(int64(key)))
			},
			func(slot func(int) []float32) {
				for j := range c.size {
					b := unsafe.Slice((*byte)(unsafe.Pointer(&slot(j)[0])), 16)
					all[j] = member{parent: j, color: int(int64(binary.LittleEndian.Uint64(b[0:]))), key: int(int64(binary.LittleEndian.Uint64(b[8:])))}
				}
			})
	})
	if err != nil {
		return nil, err
	}
	if color == NoColor {
		return nil, nil
	}
	var group []member
	for _, m := range all {
		if m.color == color {
			group = append(group, m)
		}
	}
	slices.SortFunc(group, func(a, b member) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.parent - b.parent
	})
	peers := make([]rendezvous.Peer, len(group))
	newRank := 0
	for i, m := range group {
		peers[i] = c.peers[m.parent]
		if m.parent == c.rank {
			newRank = i
		}
	}
	id := fmt.Sprintf("%s/%d/%d", c.id, seq, color)
	if len(peers) == 1 {
		return newRing(ctx, 0, peers, id, nil, "", c.opts)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return nil, err
	}
	sub, err := newShm(ctx, newRank, peers, id, c.opts, func(r int) bool { return group[r].parent == c.rank || c.seg.alive(group[r].parent) })
	if err != nil {
		return nil, fmt.Errorf("comm: split #%d (color %d): %w", seq, color, err)
	}
	return sub, nil
}

// nodeID is this machine's identity for Options.Node: the host name and the
// kernel's boot id, so that two machines with one host name (containers) differ.
func nodeID(host string) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return host
	}
	return host + "/" + string(bytes.TrimSpace(boot))
}

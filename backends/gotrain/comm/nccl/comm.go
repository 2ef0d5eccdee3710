//go:build cgo

package nccl

// #include <stdint.h>
// #include <stddef.h>
// typedef int fbResult;
// static fbResult fb_allGather(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, void* comm, uintptr_t st) {
//   return ((fbResult (*)(const void*, void*, size_t, int, void*, void*))f)((const void*)s, (void*)r, n, dt, comm, (void*)st);
// }
// static fbResult fb_reduce(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, void* comm, uintptr_t st) {
//   return ((fbResult (*)(const void*, void*, size_t, int, int, void*, void*))f)((const void*)s, (void*)r, n, dt, op, comm, (void*)st);
// }
// static fbResult fb_broadcast(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int root, void* comm, uintptr_t st) {
//   return ((fbResult (*)(const void*, void*, size_t, int, int, void*, void*))f)((const void*)s, (void*)r, n, dt, root, comm, (void*)st);
// }
// static fbResult fb_commSplit(void* f, void* comm, int color, int key, void** out) {
//   return ((fbResult (*)(void*, int, int, void**, void*))f)(comm, color, key, out, NULL);
// }
// static fbResult fb_free(void* f, void* comm) { return ((fbResult (*)(void*))f)(comm); }
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// DevicePointer is implemented by buffers in device memory (the cuda device's,
// views included): the address NCCL reads and writes.
type DevicePointer interface {
	DevicePointer() uintptr
}

// Limits on Options, checked where they enter.
const (
	maxTimeout = 24 * time.Hour
	minPoll    = time.Millisecond
	maxPoll    = 10 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.Timeout == 0 {
		o.Timeout = comm.DefaultOpTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = comm.DefaultConnectTimeout
	}
	if o.Poll == 0 {
		o.Poll = DefaultPoll
	}
	if o.Timeout < 0 || o.Timeout > maxTimeout || o.ConnectTimeout < 0 || o.ConnectTimeout > maxTimeout {
		return o, fmt.Errorf("nccl: timeouts must be between 0 and %v, got %v and %v", maxTimeout, o.Timeout, o.ConnectTimeout)
	}
	if o.Poll < minPoll || o.Poll > maxPoll {
		return o, fmt.Errorf("nccl: watchdog poll %v must be between %v and %v", o.Poll, minPoll, maxPoll)
	}
	return o, nil
}

// controlTimeout is the control ring's op timeout: after a collective fails on
// one rank (at once, for an asynchronous error) the others arrive at the status
// exchange only when their own watchdog fires, up to Timeout later, so the
// ring must wait longer than that before it calls a silent peer hung.
func (o Options) controlTimeout() time.Duration { return o.Timeout + 5*time.Second }

// Error is a collective that failed on an NCCL communicator. Every rank of the
// group reports the same failed rank when the status exchange succeeded.
type Error struct {
	// Op and Seq identify the collective (Seq counts this communicator's
	// collectives from 1).
	Op  comm.Kind
	Seq uint64
	// Rank is the world rank at fault, -1 when no rank could be singled out
	// (every rank timed out in the same collective).
	Rank int
	// Reason says what happened to Rank.
	Reason string
	// ReportedBy is the world rank that returns the error.
	ReportedBy int
	// Err is the underlying error (the control ring's *comm.PeerError when a
	// rank died or hung there), or nil.
	Err error
}

// Error names the failed rank first.
func (e *Error) Error() string {
	who := fmt.Sprintf("rank %d", e.Rank)
	if e.Rank < 0 {
		who = "no single rank"
	}
	msg := fmt.Sprintf("nccl: %s #%d: %s: %s", e.Op, e.Seq, who, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + fmt.Sprintf(" [reported by rank %d]", e.ReportedBy)
}

// Unwrap is the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Communicator is one rank's NCCL communicator and its control ring.
type Communicator struct {
	lib        *Library
	ctl        comm.Communicator
	opts       Options
	rank, size int
	world      []int // world rank of each group rank

	mu     sync.Mutex // one collective at a time; guards seq, broken, handle use
	seq    uint64
	broken error
	usable bool // false once destroyed or aborted

	// h is NCCL's communicator; it never changes, so the watchdog reads it
	// without the lock, and is freed by abort or Close only.
	h         unsafe.Pointer
	flight    atomic.Pointer[flight]
	fam       *family
	abortOnce sync.Once
	aborted   atomic.Pointer[abortInfo]
	stop      chan struct{}
	wg        sync.WaitGroup

	statsMu sync.Mutex
	stats   comm.Stats

	// started is the collective a Start* call left for its Pending's Wait (it
	// holds mu until then); nil when none.
	started atomic.Pointer[pending]
}

var (
	_ comm.Communicator      = (*Communicator)(nil)
	_ comm.BufferCollectives = (*Communicator)(nil)
)

// family is the communicators of one process that come from one world (it
// and its splits). A failure in one is the cause of what the others see next:
// a rank whose shard group failed leaves the world group too, and the world
// group must name the rank that failed first, not the one that left.
type family struct {
	mu      sync.Mutex
	verdict *Error
}

// cause is the first failure with a rank that this process saw, or nil.
func (f *family) cause() *Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verdict
}

// record keeps e as the cause unless one is known.
func (f *family) record(e *Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.verdict == nil && e.Rank >= 0 {
		f.verdict = e
	}
}

// abortInfo is why the communicator was aborted.
type abortInfo struct {
	reason string
	status int
}

// flight is the collective in progress, as the watchdog sees it.
type flight struct {
	kind     comm.Kind
	seq      uint64
	limit    time.Duration // deadline - start
	deadline time.Time
	done     <-chan struct{} // the caller's ctx
}

// Dial builds the world NCCL communicator of a worker: its control ring through
// the rendezvous store (rank 0 serves it on MASTER_PORT, as comm.Dial does),
// then the NCCL communicator from a unique id that rank 0 sends around it.
func Dial(ctx context.Context, info rendezvous.Info, lib *Library, opts Options) (*Communicator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctl, err := comm.Dial(ctx, info, comm.Options{OpTimeout: opts.controlTimeout(), ConnectTimeout: opts.ConnectTimeout})
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d: control ring: %w", info.Rank, err)
	}
	world := make([]int, info.WorldSize)
	for i := range world {
		world[i] = i
	}
	c, err := New(ctx, ctl, lib, world, opts)
	if err != nil {
		ctl.Close()
		return nil, err
	}
	return c, nil
}

// New builds the NCCL communicator of ctl's group: rank 0 creates the unique
// id and broadcasts it over ctl, every rank calls ncclCommInitRank. world maps
// ctl's ranks to world ranks, for messages. The communicator owns ctl.
func New(ctx context.Context, ctl comm.Communicator, lib *Library, world []int, opts Options) (*Communicator, error) {
	return newComm(ctx, ctl, lib, world, opts, &family{})
}

// newComm is New for a member of fam.
func newComm(ctx context.Context, ctl comm.Communicator, lib *Library, world []int, opts Options, fam *family) (*Communicator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(world) != ctl.Size() {
		return nil, fmt.Errorf("nccl: %d world ranks for a group of %d", len(world), ctl.Size())
	}
	var id [uniqueIDBytes]byte
	if ctl.Rank() == 0 {
		if id, err = lib.uniqueID(); err != nil {
			return nil, fmt.Errorf("nccl: rank %d: %w", world[0], err)
		}
	}
	if ctl.Size() > 1 {
		// 128 bytes as 32 float32 bit patterns: the ring copies bits.
		buf := make([]float32, uniqueIDBytes/4)
		for i := range buf {
			buf[i] = math.Float32frombits(uint32(id[4*i]) | uint32(id[4*i+1])<<8 | uint32(id[4*i+2])<<16 | uint32(id[4*i+3])<<24)
		}
		if err := ctl.Broadcast(ctx, buf, 0); err != nil {
			return nil, fmt.Errorf("nccl: rank %d: share the unique id: %w", world[ctl.Rank()], err)
		}
		for i, f := range buf {
			b := math.Float32bits(f)
			id[4*i], id[4*i+1], id[4*i+2], id[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
		}
	}
	h, err := lib.initRank(ctl.Size(), ctl.Rank(), id)
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", world[ctl.Rank()], err)
	}
	return launch(lib, ctl, h, world, opts, fam)
}

// launch checks NCCL's view of the group against ctl's and starts the watchdog.
func launch(lib *Library, ctl comm.Communicator, h unsafe.Pointer, world []int, opts Options, fam *family) (*Communicator, error) {
	n, r, err := lib.countRank(h)
	if err == nil && (n != ctl.Size() || r != ctl.Rank()) {
		err = fmt.Errorf("NCCL ranks this process %d of %d, the control ring %d of %d", r, n, ctl.Rank(), ctl.Size())
	}
	if err != nil {
		C.fb_free(lib.commDestroy, h)
		return nil, fmt.Errorf("nccl: rank %d: %w", world[ctl.Rank()], err)
	}
	c := &Communicator{lib: lib, ctl: ctl, opts: opts, rank: r, size: n, world: world, h: h, usable: true, fam: fam, stop: make(chan struct{})}
	c.wg.Add(1)
	go c.watchdog()
	return c, nil
}

// Library is the NCCL this communicator runs on.
func (c *Communicator) Library() *Library { return c.lib }

// Rank implements comm.Communicator.
func (c *Communicator) Rank() int { return c.rank }

// Size implements comm.Communicator.
func (c *Communicator) Size() int { return c.size }

// worldRank is this rank in the job.
func (c *Communicator) worldRank() int { return c.world[c.rank] }

// watchdog polls the collective in flight: NCCL's asynchronous error, the
// deadline and the caller's ctx. On any, it aborts the communicator, which
// ends the collective (ncclCommAbort is NCCL's one way out of a hung one).
func (c *Communicator) watchdog() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		f := c.flight.Load()
		if f == nil || c.aborted.Load() != nil {
			continue
		}
		if rc := c.lib.asyncError(c.h); rc != ncclSuccess {
			c.abort(fmt.Sprintf("NCCL asynchronous error: %s", c.lib.errorString(rc, c.h)), statusLocal)
			continue
		}
		select {
		case <-f.done:
			c.abort("cancelled", statusCancelled)
			continue
		default:
		}
		if time.Now().After(f.deadline) {
			c.abort(fmt.Sprintf("did not finish within %v", f.limit.Round(time.Millisecond)), statusTimedOut)
		}
	}
}

// abort aborts the NCCL communicator once, recording why.
func (c *Communicator) abort(why string, status int) {
	c.abortOnce.Do(func() {
		c.aborted.Store(&abortInfo{reason: why, status: status})
		C.fb_free(c.lib.commAbort, c.h)
	})
}

// Status codes exchanged over the control ring after a failure.
const (
	statusTimedOut  = 1 // waited past the deadline (or was cancelled)
	statusLocal     = 2 // NCCL reported an error on this rank
	statusCancelled = 3
	statusRemote    = 4 // another group of this process failed because of a rank
)

// run issues one collective under the watchdog: call enqueues it (and, with
// a host-memory library, runs it); then the stream is waited for.
func (c *Communicator) run(ctx context.Context, kind comm.Kind, bytes int, call func(h unsafe.Pointer, stream uintptr) C.fbResult) error {
	w, err := c.begin(ctx, kind, bytes, false, call)
	if err != nil {
		return err
	}
	return w.finish()
}

// work is a collective issued under the watchdog whose end was not seen yet;
// it holds c.mu from begin to finish, so a communicator has one at a time.
type work struct {
	c     *Communicator
	ctx   context.Context
	kind  comm.Kind
	bytes int // what count takes
	seq   uint64
	start time.Time
	rc    C.fbResult
	keep  []any // host memory the collective reads, alive until finish
}

// begin takes c.mu and issues the collective on the stream: with ordered, on
// the stream as the caller ordered it (Start*), else after Stream.Handle's wait
// for the compute stream.
func (c *Communicator) begin(ctx context.Context, kind comm.Kind, bytes int, ordered bool, call func(h unsafe.Pointer, stream uintptr) C.fbResult) (*work, error) {
	if p := c.started.Load(); p != nil {
		// mu is held until that collective's Wait: taking it here would hang
		// a caller that issues both from one goroutine.
		return nil, fmt.Errorf("nccl: %s while %s #%d was started and not waited for: Wait its Pending first", kind, p.w.kind, p.w.seq)
	}
	c.mu.Lock()
	if c.broken != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("nccl: communicator unusable after an earlier error: %w", c.broken)
	}
	if !c.usable {
		c.mu.Unlock()
		return nil, comm.ErrClosed
	}
	w := &work{c: c, ctx: ctx, kind: kind, bytes: bytes, start: time.Now()}
	c.seq++
	w.seq = c.seq
	deadline := w.start.Add(c.opts.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.flight.Store(&flight{kind: kind, seq: w.seq, limit: deadline.Sub(w.start), deadline: deadline, done: ctx.Done()})
	var stream uintptr
	switch {
	case ordered:
		stream = c.opts.Stream.(orderedStream).Ordered()
	case c.opts.Stream != nil:
		stream = c.opts.Stream.Handle()
	}
	if ctx.Err() != nil {
		// Cancelled before it began: never issue it, and tell the peers
		// through the status exchange, as a cancel in flight does.
		c.abort("cancelled", statusCancelled)
	} else {
		w.rc = call(c.h, stream)
	}
	return w, nil
}

// finish waits for the collective under the watchdog, counts it, diagnoses a
// failure and releases c.mu.
func (w *work) finish() error {
	c := w.c
	defer c.mu.Unlock()
	defer runtime.KeepAlive(w.keep)
	var local string
	switch {
	case c.aborted.Load() != nil:
	case w.rc != ncclSuccess:
		local = fmt.Sprintf("%s failed: %s", w.kind, c.lib.errorString(w.rc, c.h))
	case c.opts.Stream != nil:
		local = c.waitStream()
	default:
		// A host-memory collective is over when the call returns; an error
		// raised in the background surfaces here.
		if e := c.lib.asyncError(c.h); e != ncclSuccess {
			local = fmt.Sprintf("NCCL asynchronous error: %s", c.lib.errorString(e, c.h))
		}
	}
	c.flight.Store(nil)
	if w.kind != comm.KindSplit {
		c.count(w.kind, w.bytes, time.Since(w.start))
	}
	if local != "" {
		c.abort(local, statusLocal)
	}
	why := c.aborted.Load()
	if why == nil {
		return nil
	}
	c.usable = false
	e := c.diagnose(w.ctx, w.kind, w.seq, why.status, why.reason)
	c.fam.record(e)
	c.broken = e
	return e
}

// waitStream waits for the stream while the watchdog runs; it returns a
// reason when the device failed, "" otherwise (an abort is seen by run).
func (c *Communicator) waitStream() string {
	for c.aborted.Load() == nil {
		done, err := c.opts.Stream.Done()
		if err != nil {
			return fmt.Sprintf("the device failed under the collective: %v", err)
		}
		if done {
			return ""
		}
		time.Sleep(50 * time.Microsecond)
	}
	return ""
}

// diagnose exchanges every rank's status over the control ring, so all ranks
// name the same rank: one that reported an NCCL error; else the cause another
// group of a rank's process already found; else one that never issued this
// collective. A rank that died or hung meanwhile is named by the ring itself.
func (c *Communicator) diagnose(ctx context.Context, kind comm.Kind, seq uint64, status int, reason string) *Error {
	e := &Error{Op: kind, Seq: seq, Rank: c.worldRank(), Reason: reason, ReportedBy: c.worldRank()}
	culprit := c.worldRank()
	if status != statusLocal {
		e.Rank = -1
		if v := c.fam.cause(); v != nil {
			status, culprit = statusRemote, v.Rank
			e.Rank, e.Reason = v.Rank, fmt.Sprintf("failed first, in another group (%s)", v.Reason)
		}
	}
	if c.size == 1 {
		if e.Rank < 0 && status != statusCancelled {
			e.Rank = c.worldRank() // alone, a hang can only be this rank's
		}
		return e
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.opts.controlTimeout())
	defer cancel()
	mine := []float32{float32(status), math.Float32frombits(uint32(seq)), float32(culprit)}
	all := make([]float32, 3*c.size)
	if err := c.ctl.AllGather(dctx, all, mine); err != nil {
		if e.Rank >= 0 {
			return e // the cause is known here; the ring saw its consequence
		}
		var pe *comm.PeerError
		if errors.As(err, &pe) {
			e.Rank, e.Reason, e.Err = pe.Rank, fmt.Sprintf("found by the control ring while the collective %s", reason), pe
			return e
		}
		e.Err = err
		return e
	}
	rec := func(r int) (int, uint64, int) {
		return int(all[3*r]), uint64(math.Float32bits(all[3*r+1])), int(all[3*r+2])
	}
	for r := range c.size {
		if st, _, _ := rec(r); st == statusLocal {
			if r != c.rank {
				e.Rank, e.Reason = c.world[r], "NCCL error on that rank (its own report has the details)"
			}
			return e
		}
	}
	for r := range c.size {
		if st, _, who := rec(r); st == statusRemote {
			if r != c.rank {
				e.Rank, e.Reason = who, fmt.Sprintf("failed first, in another group (rank %d saw it)", c.world[r])
			}
			return e
		}
	}
	for r := range c.size {
		if _, at, _ := rec(r); at < seq {
			e.Rank, e.Reason = c.world[r], fmt.Sprintf("never issued the collective (it was at #%d)", at)
			return e
		}
	}
	if status != statusCancelled {
		e.Reason = fmt.Sprintf("every rank timed out in it (%s): a hang inside NCCL or the device", reason)
	}
	return e
}

// count adds one collective of bytes to the stats: bytes as NCCL's ring algorithm moves
// them (what the TCP ring counts for the same call), not measured.
func (c *Communicator) count(kind comm.Kind, bytes int, d time.Duration) {
	n, size := int64(bytes), int64(c.size)
	var sent, recv int64
	switch kind {
	case comm.KindAllGather, comm.KindReduceScatter:
		sent, recv = n*(size-1), n*(size-1)
	case comm.KindAllReduce, comm.KindBarrier:
		sent = 2 * (size - 1) * n / size
		recv = sent
	case comm.KindBroadcast:
		if size > 1 {
			sent, recv = n, n
		}
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	s := c.stats.Of(kind)
	s.Calls++
	s.BytesSent += sent
	s.BytesReceived += recv
	s.Time += d
}

// pointer is b's address for NCCL: its device pointer, or its host memory
// with a host-memory library.
func (c *Communicator) pointer(b device.Buffer) (uintptr, []float32, error) {
	if p, ok := b.(DevicePointer); ok {
		return p.DevicePointer(), nil, nil
	}
	if !c.lib.HostMemory {
		return 0, nil, fmt.Errorf("nccl: %s buffers have no device pointer; NCCL %s needs device memory (use the cuda device, or comm: tcp on cpu)", b.Device().Name(), c.lib.VersionString())
	}
	h, err := comm.HostView(b)
	if err != nil {
		return 0, nil, err
	}
	return hostPtr(h), h, nil
}

// hostPtr is the address of a host slice (0 for an empty one). The slice must
// stay reachable (runtime.KeepAlive) until the collective is done; Go's heap
// does not move.
func hostPtr(h []float32) uintptr {
	if len(h) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&h[0]))
}

func (c *Communicator) checkLen(kind comm.Kind, dst, src, wantDst int) error {
	if dst != wantDst {
		return fmt.Errorf("nccl: %s: dst has %d elements, want %d (src %d × size %d or src / size)", kind, dst, wantDst, src, c.size)
	}
	return nil
}

func ncclOp(op comm.Op) (C.int, error) {
	switch op {
	case comm.Sum:
		return ncclSum, nil
	case comm.Average:
		return ncclAvg, nil
	}
	return 0, fmt.Errorf("nccl: unknown reduction %v (want Sum or Average)", op)
}

func (c *Communicator) allGather(ctx context.Context, dst, src uintptr, n int, dt C.int) error {
	es := 4
	if dt == ncclBfloat16 {
		es = 2
	}
	return c.run(ctx, comm.KindAllGather, n*es, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fb_allGather(c.lib.allGather, C.uintptr_t(src), C.uintptr_t(dst), C.size_t(n), dt, h, C.uintptr_t(st))
	})
}

func (c *Communicator) reduceScatter(ctx context.Context, dst, src uintptr, n int, op comm.Op) error {
	o, err := ncclOp(op)
	if err != nil {
		return err
	}
	return c.run(ctx, comm.KindReduceScatter, 4*n, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fb_reduce(c.lib.reduceScatter, C.uintptr_t(src), C.uintptr_t(dst), C.size_t(n), ncclFloat32, o, h, C.uintptr_t(st))
	})
}

func (c *Communicator) allReduce(ctx context.Context, kind comm.Kind, buf uintptr, n int, op comm.Op) error {
	o, err := ncclOp(op)
	if err != nil {
		return err
	}
	return c.run(ctx, kind, 4*n, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fb_reduce(c.lib.allReduce, C.uintptr_t(buf), C.uintptr_t(buf), C.size_t(n), ncclFloat32, o, h, C.uintptr_t(st))
	})
}

func (c *Communicator) broadcast(ctx context.Context, buf uintptr, n, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("nccl: broadcast: root %d is outside a group of %d", root, c.size)
	}
	return c.run(ctx, comm.KindBroadcast, 4*n, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fb_broadcast(c.lib.broadcast, C.uintptr_t(buf), C.uintptr_t(buf), C.size_t(n), ncclFloat32, C.int(root), h, C.uintptr_t(st))
	})
}

// AllGatherBuffers implements comm.BufferCollectives. bf16 buffers (the gathered
// parameters of the bf16 policy) go as ncclBfloat16; a host-memory library gets
// a cpu device's bf16 values (float32 slots holding bf16 values) as 2-byte
// encodings staged on the host.
func (c *Communicator) AllGatherBuffers(ctx context.Context, dst, src device.Buffer) error {
	if err := c.checkLen(comm.KindAllGather, dst.Len(), src.Len(), src.Len()*c.size); err != nil {
		return err
	}
	dt := device.DTypeOf(src)
	if device.DTypeOf(dst) != dt {
		return fmt.Errorf("nccl: all_gather from %v into %v: one dtype on both sides", dt, device.DTypeOf(dst))
	}
	if dt == device.BF16 {
		return c.allGatherBF16(ctx, dst, src)
	}
	d, dh, err := c.pointer(dst)
	if err != nil {
		return err
	}
	s, sh, err := c.pointer(src)
	if err != nil {
		return err
	}
	err = c.allGather(ctx, d, s, src.Len(), ncclFloat32)
	runtime.KeepAlive(dh)
	runtime.KeepAlive(sh)
	return err
}

// allGatherBF16 is AllGatherBuffers of bf16 buffers.
func (c *Communicator) allGatherBF16(ctx context.Context, dst, src device.Buffer) error {
	dp, dok := dst.(DevicePointer)
	sp, sok := src.(DevicePointer)
	if dok && sok {
		return c.allGather(ctx, dp.DevicePointer(), sp.DevicePointer(), src.Len(), ncclBfloat16)
	}
	if !c.lib.HostMemory {
		return fmt.Errorf("nccl: %s buffers have no device pointer; NCCL %s needs device memory (use the cuda device, or comm: tcp on cpu)", src.Device().Name(), c.lib.VersionString())
	}
	dh, err := comm.HostView(dst)
	if err != nil {
		return err
	}
	sh, err := comm.HostView(src)
	if err != nil {
		return err
	}
	send, recv := make([]uint16, len(sh)), make([]uint16, len(dh))
	for i, x := range sh {
		send[i] = device.BF16Bits(x)
	}
	err = c.allGather(ctx, addr16(recv), addr16(send), len(sh), ncclBfloat16)
	runtime.KeepAlive(send)
	runtime.KeepAlive(recv)
	if err != nil {
		return err
	}
	for i, b := range recv {
		dh[i] = device.FromBF16Bits(b)
	}
	return nil
}

// addr16 is the address of a host slice of bf16 encodings (0 for an empty one).
func addr16(h []uint16) uintptr {
	if len(h) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&h[0]))
}

// ReduceScatterBuffers implements comm.BufferCollectives.
func (c *Communicator) ReduceScatterBuffers(ctx context.Context, dst, src device.Buffer, op comm.Op) error {
	if err := refuseBF16(comm.KindReduceScatter, dst, src); err != nil {
		return err
	}
	if err := c.checkLen(comm.KindReduceScatter, dst.Len()*c.size, src.Len(), src.Len()); err != nil {
		return err
	}
	d, dh, err := c.pointer(dst)
	if err != nil {
		return err
	}
	s, sh, err := c.pointer(src)
	if err != nil {
		return err
	}
	err = c.reduceScatter(ctx, d, s, dst.Len(), op)
	runtime.KeepAlive(dh)
	runtime.KeepAlive(sh)
	return err
}

// refuseBF16 is the error of a reduction on bf16 buffers: the trainer reduces
// in fp32 (reduce_dtype).
func refuseBF16(kind comm.Kind, bs ...device.Buffer) error {
	for _, b := range bs {
		if t := device.DTypeOf(b); t != device.F32 {
			return fmt.Errorf("nccl: %s of a %v buffer: reductions run in float32 (reduce_dtype); cast the gradient first", kind, t)
		}
	}
	return nil
}

// AllReduceBuffers implements comm.BufferCollectives.
func (c *Communicator) AllReduceBuffers(ctx context.Context, buf device.Buffer, op comm.Op) error {
	if err := refuseBF16(comm.KindAllReduce, buf); err != nil {
		return err
	}
	p, h, err := c.pointer(buf)
	if err != nil {
		return err
	}
	err = c.allReduce(ctx, comm.KindAllReduce, p, buf.Len(), op)
	runtime.KeepAlive(h)
	return err
}

// BroadcastBuffers implements comm.BufferCollectives.
func (c *Communicator) BroadcastBuffers(ctx context.Context, buf device.Buffer, root int) error {
	p, h, err := c.pointer(buf)
	if err != nil {
		return err
	}
	err = c.broadcast(ctx, p, buf.Len(), root)
	runtime.KeepAlive(h)
	return err
}

// hostCall runs a collective on host slices: directly with a host-memory
// library, else through Staging's device scratch (in first, out after).
func (c *Communicator) hostCall(in, out [][]float32, do func(ptrs []uintptr) error) error {
	all := append(append([][]float32(nil), in...), out...)
	if c.lib.HostMemory {
		ptrs := make([]uintptr, len(all))
		for i, s := range all {
			ptrs[i] = hostPtr(s)
		}
		err := do(ptrs)
		runtime.KeepAlive(all)
		return err
	}
	if c.opts.Staging == nil {
		return fmt.Errorf("nccl: a collective on host memory needs the device's staging (Options.Staging); NCCL %s reads device memory only", c.lib.VersionString())
	}
	total := 0
	for _, s := range all {
		total += len(s)
	}
	base, err := c.opts.Staging.Scratch(total)
	if err != nil {
		return fmt.Errorf("nccl: staging: %w", err)
	}
	ptrs := make([]uintptr, len(all))
	off := uintptr(0)
	for i, s := range all {
		ptrs[i] = base + off
		off += uintptr(len(s)) * 4
		if i < len(in) {
			if err := c.opts.Staging.ToDevice(ptrs[i], s); err != nil {
				return fmt.Errorf("nccl: staging: %w", err)
			}
		}
	}
	if err := do(ptrs); err != nil {
		return err
	}
	for i, s := range out {
		if err := c.opts.Staging.ToHost(s, ptrs[len(in)+i]); err != nil {
			return fmt.Errorf("nccl: staging: %w", err)
		}
	}
	return nil
}

// AllGather implements comm.Communicator.
func (c *Communicator) AllGather(ctx context.Context, dst, src []float32) error {
	if err := c.checkLen(comm.KindAllGather, len(dst), len(src), len(src)*c.size); err != nil {
		return err
	}
	return c.hostCall([][]float32{src}, [][]float32{dst}, func(p []uintptr) error { return c.allGather(ctx, p[1], p[0], len(src), ncclFloat32) })
}

// ReduceScatter implements comm.Communicator.
func (c *Communicator) ReduceScatter(ctx context.Context, dst, src []float32, op comm.Op) error {
	if err := c.checkLen(comm.KindReduceScatter, len(dst)*c.size, len(src), len(src)); err != nil {
		return err
	}
	return c.hostCall([][]float32{src}, [][]float32{dst}, func(p []uintptr) error { return c.reduceScatter(ctx, p[1], p[0], len(dst), op) })
}

// AllReduce implements comm.Communicator.
func (c *Communicator) AllReduce(ctx context.Context, buf []float32, op comm.Op) error {
	if c.lib.HostMemory {
		return c.hostCall(nil, [][]float32{buf}, func(p []uintptr) error { return c.allReduce(ctx, comm.KindAllReduce, p[0], len(buf), op) })
	}
	return c.hostCall([][]float32{buf}, nil, func(p []uintptr) error {
		if err := c.allReduce(ctx, comm.KindAllReduce, p[0], len(buf), op); err != nil {
			return err
		}
		return c.opts.Staging.ToHost(buf, p[0])
	})
}

// Broadcast implements comm.Communicator.
func (c *Communicator) Broadcast(ctx context.Context, buf []float32, root int) error {
	if c.lib.HostMemory {
		return c.hostCall(nil, [][]float32{buf}, func(p []uintptr) error { return c.broadcast(ctx, p[0], len(buf), root) })
	}
	return c.hostCall([][]float32{buf}, nil, func(p []uintptr) error {
		if err := c.broadcast(ctx, p[0], len(buf), root); err != nil {
			return err
		}
		return c.opts.Staging.ToHost(buf, p[0])
	})
}

// Barrier implements comm.Communicator: an all-reduce of one element, as
// torch.distributed.barrier does on NCCL.
func (c *Communicator) Barrier(ctx context.Context) error {
	one := []float32{1}
	in, out := [][]float32{one}, [][]float32(nil)
	if c.lib.HostMemory {
		in, out = nil, in
	}
	return c.hostCall(in, out, func(p []uintptr) error { return c.allReduce(ctx, comm.KindBarrier, p[0], 1, comm.Sum) })
}

// Split implements comm.Communicator: the control ring splits first (it is a
// collective of the parent), then NCCL: ncclCommSplit where the library has it,
// else a fresh unique id per color sent around the new control ring.
func (c *Communicator) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	t0 := time.Now()
	defer func() { c.count(comm.KindSplit, 0, time.Since(t0)) }()
	sub, err := c.ctl.Split(ctx, color, key)
	if err != nil {
		return nil, fmt.Errorf("nccl: split: %w", err)
	}
	if !c.lib.HasSplit() {
		if sub == nil {
			return nil, nil
		}
		world, err := c.subWorld(ctx, sub)
		if err != nil {
			sub.Close()
			return nil, err
		}
		nc, err := newComm(ctx, sub, c.lib, world, c.opts, c.fam)
		if err != nil {
			sub.Close()
			return nil, err
		}
		return nc, nil
	}
	ncolor := C.int(color)
	if color == comm.NoColor {
		ncolor = ncclSplitNoColor
	}
	var h unsafe.Pointer
	err = c.runSplit(ctx, func(parent unsafe.Pointer) C.fbResult {
		return C.fb_commSplit(c.lib.commSplit, parent, ncolor, C.int(key), &h)
	})
	if err != nil {
		if sub != nil {
			sub.Close()
		}
		return nil, err
	}
	if sub == nil {
		if h != nil {
			C.fb_free(c.lib.commDestroy, h)
		}
		return nil, nil
	}
	world, err := c.subWorld(ctx, sub)
	if err == nil && h == nil {
		err = errors.New("nccl: ncclCommSplit returned no communicator for a color")
	}
	if err != nil {
		if h != nil {
			C.fb_free(c.lib.commDestroy, h)
		}
		sub.Close()
		return nil, err
	}
	nc, err := launch(c.lib, sub, h, world, c.opts, c.fam)
	if err != nil {
		sub.Close()
		return nil, err
	}
	return nc, nil
}

// runSplit runs ncclCommSplit on the parent under the watchdog.
func (c *Communicator) runSplit(ctx context.Context, call func(parent unsafe.Pointer) C.fbResult) error {
	return c.run(ctx, comm.KindSplit, 0, func(h unsafe.Pointer, _ uintptr) C.fbResult { return call(h) })
}

// subWorld gathers the world rank of each rank of a new group.
func (c *Communicator) subWorld(ctx context.Context, sub comm.Communicator) ([]int, error) {
	all := make([]float32, sub.Size())
	if err := sub.AllGather(ctx, all, []float32{float32(c.worldRank())}); err != nil {
		return nil, fmt.Errorf("nccl: split: %w", err)
	}
	out := make([]int, len(all))
	for i, f := range all {
		out[i] = int(f)
	}
	return out, nil
}

// Stats implements comm.Communicator: the NCCL collectives, plus what the
// control ring moved for setup and splits.
func (c *Communicator) Stats() comm.Stats {
	c.statsMu.Lock()
	s := c.stats
	c.statsMu.Unlock()
	ctl := c.ctl.Stats()
	s.Split = s.Split.Add(comm.OpStats{BytesSent: ctl.Split.BytesSent, BytesReceived: ctl.Split.BytesReceived})
	return s
}

// Close destroys the NCCL communicator (unless the watchdog aborted it) and
// closes the control ring.
func (c *Communicator) Close() error {
	if p := c.started.Load(); p != nil {
		_ = p.Wait() // it holds mu; its error was the caller's to see
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.stop:
		return nil
	default:
	}
	close(c.stop)
	c.wg.Wait()
	var err error
	if c.usable && c.aborted.Load() == nil && c.fam.cause() != nil {
		// Another group of this process failed: this one's peers may be
		// waiting in a collective that this rank will never issue; they time
		// out and exchange statuses, and learn the cause from this rank.
		c.abort("closed after a failure in another group", statusRemote)
		c.diagnose(context.Background(), comm.KindBarrier, c.seq+1, statusRemote, "")
		c.usable = false
	}
	if c.usable && c.aborted.Load() == nil {
		if rc := C.fb_free(c.lib.commDestroy, c.h); rc != ncclSuccess {
			err = fmt.Errorf("nccl: ncclCommDestroy: code %d", int(rc))
		}
	}
	c.usable = false
	return errors.Join(err, c.ctl.Close())
}

package comm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// abortGrace is how long a failing rank waits for its sender to reach a frame
// boundary (so that an abort frame can follow cleanly) and for an abort frame from
// its previous rank, before forcing its connections.
const abortGrace = time.Second

// past is a deadline that has passed: setting it unblocks pending I/O at once.
var past = time.Unix(1, 0)

// errStopped ends a send or receive loop at a frame boundary because the collective
// is failing elsewhere; it never reaches the caller.
var errStopped = errors.New("stopped")

// progress is the shared state of one collective's sender and receiver.
type progress struct {
	sent, recvd     atomic.Int64  // send and receive items completed
	sentCh, recvdCh chan struct{} // capacity 1: "the counter moved"
	stopCh          chan struct{} // closed on failure: both loops leave at their next frame boundary
	stopOnce        sync.Once

	// stallEvery is how often a sender that waits for data from prev tells next
	// that it is alive and waiting (a stall frame).
	stallEvery time.Duration
	hardCap    time.Time // no extension of the read deadline goes past this

	mu          sync.Mutex
	forced      bool // this rank pushed a deadline into the past (ctx, grace): timeouts are its own doing
	finished    bool // the collective returned: late callbacks must not touch the connections
	prevWaiting bool // prev sent a stall frame since the last deadline extension
}

func newProgress(stallEvery time.Duration, hardCap time.Time) *progress {
	return &progress{
		sentCh: make(chan struct{}, 1), recvdCh: make(chan struct{}, 1), stopCh: make(chan struct{}),
		stallEvery: stallEvery, hardCap: hardCap,
	}
}

// wait blocks until counter ≥ n. While it blocks, idle (when non-nil) runs every
// stallEvery. It reports false when the collective is stopping, with idle's error if
// that is why.
func (p *progress) wait(counter *atomic.Int64, moved chan struct{}, n int, idle func() error) (bool, error) {
	if counter.Load() < int64(n) {
		var tick <-chan time.Time
		if idle != nil {
			t := time.NewTicker(p.stallEvery)
			defer t.Stop()
			tick = t.C
		}
		for counter.Load() < int64(n) {
			select {
			case <-moved:
			case <-p.stopCh:
				return false, nil
			case <-tick:
				if err := idle(); err != nil {
					return false, err
				}
			}
		}
	}
	return !p.stopped(), nil
}

func (p *progress) done(counter *atomic.Int64, moved chan struct{}) {
	counter.Add(1)
	select {
	case moved <- struct{}{}:
	default:
	}
}

func (p *progress) halt() { p.stopOnce.Do(func() { close(p.stopCh) }) }

func (p *progress) stopped() bool {
	select {
	case <-p.stopCh:
		return true
	default:
		return false
	}
}

// force pushes a connection's deadline into the past unless the collective is over.
func (p *progress) force(set func(time.Time) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.forced = true
	p.halt()
	_ = set(past)
}

func (p *progress) finish() {
	p.mu.Lock()
	p.finished = true
	p.mu.Unlock()
}

func (p *progress) wasForced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forced
}

func (p *progress) sawStall(waiting bool) {
	p.mu.Lock()
	p.prevWaiting = waiting
	p.mu.Unlock()
}

// extend gives prev more time after a read timeout when prev has shown, with stall
// frames, that it is alive and itself waiting for data from further up the ring: the
// rank that is really stuck is upstream, and the rank just after it will time out
// and send an abort frame that names it. It reports whether it extended.
func (p *progress) extend(set func(time.Time) error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.forced || p.finished || !p.prevWaiting || !now.Before(p.hardCap) {
		return false
	}
	p.prevWaiting = false
	next := now.Add(2 * p.stallEvery)
	if next.After(p.hardCap) {
		next = p.hardCap
	}
	return set(next) == nil
}

// deadlines returns a collective's read deadline (the op timeout, or ctx's deadline
// if sooner) and its hard cap: writes, and reads waiting behind a waiting rank, may
// go on until twice the op timeout, so that the rank closest to a hung peer times
// out first and its abort frame reaches everyone.
func (c *ring) deadlines(ctx context.Context) (read, hardCap time.Time) {
	now := time.Now()
	read, hardCap = now.Add(c.opts.OpTimeout), now.Add(2*c.opts.OpTimeout)
	if d, ok := ctx.Deadline(); ok {
		if d.Before(read) {
			read = d
		}
		if d.Before(hardCap) {
			hardCap = d
		}
	}
	return read, hardCap
}

func (c *ring) stallInterval() time.Duration {
	return max(c.opts.OpTimeout/4, time.Millisecond)
}

// execute runs the laid-out schedule (c.sends on a sender goroutine, c.recvs here).
func (c *ring) execute(ctx context.Context, kind Kind, seq, total uint64, aux uint32) error {
	if len(c.sends) == 0 && len(c.recvs) == 0 {
		return nil
	}
	readDeadline, hardCap := c.deadlines(ctx)
	if err := errors.Join(c.next.SetWriteDeadline(hardCap), c.prev.SetReadDeadline(readDeadline)); err != nil {
		return c.fail(ctx, kind, seq, outcome{recvErr: err})
	}
	p := newProgress(c.stallInterval(), hardCap)
	defer p.finish()
	// Cancellation interrupts only the receive side: the sender finishes the frame
	// it is writing, so that the abort frame telling the peers can follow it.
	unwatch := context.AfterFunc(ctx, func() { p.force(c.prev.SetReadDeadline) })
	defer unwatch()

	type sendResult struct {
		err   error
		dirty bool // stopped inside a frame
	}
	sendDone := make(chan sendResult, 1)
	go func() {
		err, dirty := c.sendLoop(p, kind, seq, total, aux)
		if err != nil && err != errStopped {
			// Let an abort frame from prev arrive (it names the failed rank better
			// than this broken send does), then stop waiting for it.
			p.halt()
			time.AfterFunc(abortGrace, func() { p.force(c.prev.SetReadDeadline) })
		}
		sendDone <- sendResult{err, dirty}
	}()

	rerr := c.recvLoop(p, kind, seq, total, aux)
	var sres sendResult
	if rerr == nil {
		sres = <-sendDone // the normal end: the last frames drain, bounded by the deadline
	} else {
		p.halt()
		timer := time.NewTimer(abortGrace)
		select {
		case sres = <-sendDone:
		case <-timer.C:
			// The sender is stuck inside a frame (next is not reading): cut it off,
			// so that no goroutine touches the caller's buffers after we return.
			p.force(c.next.SetWriteDeadline)
			sres = <-sendDone
		}
		timer.Stop()
	}
	if rerr == nil && sres.err == nil {
		return nil
	}
	p.finish() // before fail starts draining: no late timer may touch prev's deadline
	return c.fail(ctx, kind, seq, outcome{recvErr: rerr, sendErr: sres.err, sendDirty: sres.dirty, forced: p.wasForced()})
}

// sendLoop writes c.sends in order, each once the receive items it depends on are
// complete; while it waits, it sends stall frames. dirty reports an error inside a
// frame.
func (c *ring) sendLoop(p *progress, kind Kind, seq, total uint64, aux uint32) (err error, dirty bool) {
	stall := func() error {
		header{kind: kindStall, seq: seq}.put(c.hdrW[:])
		if _, err := c.w.Write(c.hdrW[:]); err != nil {
			return err
		}
		return c.w.Flush()
	}
	for i, it := range c.sends {
		ok, err := p.wait(&p.recvd, p.recvdCh, it.after, stall)
		if err != nil {
			return err, true
		}
		if !ok {
			return errStopped, false
		}
		header{kind: kind, payload: uint32(4 * len(it.data)), seq: seq, total: total, frame: uint32(i), aux: aux}.put(c.hdrW[:])
		if _, err := c.w.Write(c.hdrW[:]); err != nil {
			return err, true
		}
		if err := c.sendCodec.write(c.w, it.data); err != nil {
			return err, true
		}
		if err := c.w.Flush(); err != nil {
			return err, true
		}
		p.done(&p.sent, p.sentCh)
	}
	return nil, false
}

// recvLoop reads c.recvs in order, each once the send items it depends on are done.
func (c *ring) recvLoop(p *progress, kind Kind, seq, total uint64, aux uint32) error {
	size := float32(c.size)
	for j, it := range c.recvs {
		if ok, _ := p.wait(&p.sent, p.sentCh, it.after, nil); !ok {
			return errStopped
		}
		want := header{kind: kind, payload: uint32(4 * len(it.dst)), seq: seq, total: total, frame: uint32(j), aux: aux}
		if err := c.readHeader(p, want); err != nil {
			return err
		}
		if it.own == nil {
			if err := c.recvCodec.read(c.r, it.dst); err != nil {
				return err
			}
		} else {
			in := c.stage[:len(it.dst)]
			if err := c.recvCodec.read(c.r, in); err != nil {
				return err
			}
			if it.scale {
				addDiv(it.dst, in, it.own, size)
			} else {
				add(it.dst, in, it.own)
			}
		}
		p.done(&p.recvd, p.recvdCh)
	}
	return nil
}

// add sets dst = a + b. The order of the operands is fixed (received + own) so that
// every run sums in the same order.
func add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// addDiv sets dst = (a + b) / d.
func addDiv(dst, a, b []float32, d float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = (a[i] + b[i]) / d
	}
}

// abortFrame is a failure reported by a peer and travelling around the ring.
type abortFrame struct {
	origin   int // group rank of the failed peer
	reporter int // world rank that noticed
	reason   string
	raw      []byte
}

func (a *abortFrame) Error() string { return "abort: " + a.reason }

// desyncError is a frame other than the one this rank expected.
type desyncError struct{ got, want header }

func (d *desyncError) Error() string {
	return fmt.Sprintf("received %v, expected %v: every rank must issue the same collectives in the same order with the same sizes", d.got, d.want)
}

// nextHeader reads the next frame header, skipping stall frames; an abort frame
// comes back as *abortFrame. A read timeout before any byte of a header is extended
// while prev keeps sending stall frames (see progress.extend).
func (c *ring) nextHeader(p *progress) (header, error) {
	for {
		n, err := io.ReadFull(c.r, c.hdrR[:])
		if err != nil {
			if n == 0 && isTimeout(err) && p.extend(c.prev.SetReadDeadline) {
				continue
			}
			return header{}, err
		}
		h, err := c.parseFrameHeader()
		if err == nil && h.kind == kindStall {
			p.sawStall(true)
			continue
		}
		p.sawStall(false)
		return h, err
	}
}

// parseFrameHeader parses c.hdrR and reads an abort frame's body.
func (c *ring) parseFrameHeader() (header, error) {
	h, err := parseHeader(c.hdrR[:])
	if err != nil {
		return h, &protocolError{err}
	}
	if h.kind != kindAbort {
		return h, nil
	}
	if h.payload > maxAbortPayload {
		return h, &protocolError{fmt.Errorf("abort frame of %d bytes", h.payload)}
	}
	raw := make([]byte, h.payload)
	if _, err := io.ReadFull(c.r, raw); err != nil {
		return h, err
	}
	origin, reporter, reason, err := parseAbort(raw)
	if err != nil || origin >= c.size {
		return h, &protocolError{fmt.Errorf("malformed abort frame (origin %d): %v", origin, err)}
	}
	return h, &abortFrame{origin: origin, reporter: reporter, reason: reason, raw: raw}
}

// readHeader reads the next frame header and checks it against want.
func (c *ring) readHeader(p *progress, want header) error {
	h, err := c.nextHeader(p)
	if err != nil {
		return err
	}
	if h != want {
		return &desyncError{got: h, want: want}
	}
	return nil
}

// protocolError is a byte stream that is not this protocol.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

// outcome is how the two halves of a failed collective ended.
type outcome struct {
	recvErr   error // nil, errStopped, *abortFrame, *desyncError, or an I/O error
	sendErr   error // nil, errStopped, or an I/O error
	sendDirty bool  // the send stream may end inside a frame
	forced    bool  // timeouts were forced by this rank, not caused by a peer
}

// real says whether err is a failure observed on the wire, as opposed to this
// rank's own stopping.
func (o outcome) real(err error) bool {
	if err == nil || err == errStopped {
		return false
	}
	var ne net.Error
	if o.forced && errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

// fail turns an outcome into the caller's error, tells the next rank (an abort
// frame, or a closed connection when the stream cannot carry one), keeps draining
// the previous rank so that nobody upstream blocks on this rank, and marks the
// communicator broken.
func (c *ring) fail(ctx context.Context, kind Kind, seq uint64, o outcome) error {
	if c.isClosed() {
		return fmt.Errorf("comm: %s #%d: %w", kind, seq, ErrClosed)
	}
	prev, next := mod(c.rank-1, c.size), mod(c.rank+1, c.size)
	var err error
	var forward []byte // the abort payload to pass on
	nextBroken := o.sendDirty
	var af *abortFrame
	switch {
	case errors.As(o.recvErr, &af):
		err = c.peerError(kind, seq, af.origin, af.reporter, af.reason, nil)
		forward = af.raw
	case ctxErr(ctx) != nil:
		err = fmt.Errorf("comm: %s #%d on rank %d: %w", kind, seq, c.worldRank(), ctxErr(ctx))
		forward = abortPayload(c.rank, c.worldRank(), fmt.Sprintf("gave up on the collective: %v", ctxErr(ctx)))
	case o.real(o.recvErr):
		reason := c.readReason(o.recvErr)
		err = c.peerError(kind, seq, prev, c.worldRank(), reason, o.recvErr)
		forward = abortPayload(prev, c.worldRank(), reason+": "+o.recvErr.Error())
	case o.real(o.sendErr):
		nextBroken = true
		// The send broke, but next may only have exited after failing itself: an
		// abort frame from prev, if one comes, names the rank that really failed.
		// The receive side must have stopped at a frame boundary to look for it.
		if o.recvErr == nil || o.recvErr == errStopped {
			if af := c.awaitAbort(); af != nil {
				err = c.peerError(kind, seq, af.origin, af.reporter, af.reason, nil)
				break
			}
		}
		err = c.peerError(kind, seq, next, c.worldRank(), c.writeReason(o.sendErr), o.sendErr)
	default:
		err = fmt.Errorf("comm: %s #%d on rank %d stopped without a cause (recv: %v, send: %v); this is a bug", kind, seq, c.worldRank(), o.recvErr, o.sendErr)
		forward = abortPayload(c.rank, c.worldRank(), err.Error())
	}
	if !nextBroken && forward != nil {
		nextBroken = c.sendAbort(seq, forward) != nil
	}
	if nextBroken {
		// A half-written frame would leave next waiting for the rest until its
		// timeout; a closed connection tells it at once.
		_ = c.next.Close()
	}
	c.drainPrev()
	c.broken = err
	return err
}

// awaitAbort reads what prev still sends, for up to abortGrace, until an abort
// frame comes (returned) or the stream ends, fails or runs dry (nil). Frames of the
// collective are skipped. It needs the stream at a frame boundary. Without it a
// rank whose next exited right after failing blamed next, while the abort frame
// naming the dead rank was on its way from prev (seen in CI: 1 of 4 ranks).
func (c *ring) awaitAbort() *abortFrame {
	if c.prev.SetReadDeadline(time.Now().Add(abortGrace)) != nil {
		return nil
	}
	for {
		if _, err := io.ReadFull(c.r, c.hdrR[:]); err != nil {
			return nil
		}
		h, err := c.parseFrameHeader()
		var af *abortFrame
		switch {
		case errors.As(err, &af):
			return af
		case err != nil:
			return nil
		}
		if _, err := io.CopyN(io.Discard, c.r, int64(h.payload)); err != nil {
			return nil
		}
	}
}

// sendAbort writes an abort frame, giving up after abortGrace.
func (c *ring) sendAbort(seq uint64, payload []byte) error {
	if err := c.next.SetWriteDeadline(time.Now().Add(abortGrace)); err != nil {
		return err
	}
	header{kind: kindAbort, payload: uint32(len(payload)), seq: seq}.put(c.hdrW[:])
	if _, err := c.w.Write(c.hdrW[:]); err != nil {
		return err
	}
	if _, err := c.w.Write(payload); err != nil {
		return err
	}
	return c.w.Flush()
}

// drainPrev discards whatever prev still sends, until Close, so that prev's sender
// never blocks on this rank and can pass the abort frame it may be carrying.
func (c *ring) drainPrev() {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed {
		return
	}
	_ = c.prev.SetReadDeadline(time.Time{})
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		_, _ = io.Copy(io.Discard, c.r)
	}()
}

func (c *ring) peerError(kind Kind, seq uint64, groupRank, reporter int, reason string, err error) *PeerError {
	p := c.peers[groupRank]
	return &PeerError{Op: kind, Seq: seq, Rank: p.Rank, GroupRank: groupRank, Host: p.Host, Addr: p.Addr,
		Reason: reason, ReportedBy: reporter, Err: err}
}

func (c *ring) readReason(err error) string {
	var d *desyncError
	var pe *protocolError
	switch {
	case errors.As(err, &d):
		return fmt.Sprintf("is out of step with rank %d", c.worldRank())
	case errors.As(err, &pe):
		return fmt.Sprintf("sent rank %d bytes that are not this protocol", c.worldRank())
	case isTimeout(err):
		return fmt.Sprintf("sent rank %d nothing for %v (hung, or issuing a different collective; raise %s if it is only slow)", c.worldRank(), c.opts.OpTimeout, c.opts.TimeoutName)
	case isClosedByPeer(err):
		return "closed its connection in the middle of the collective (the process died, or closed its communicator)"
	}
	return fmt.Sprintf("rank %d could not receive from it", c.worldRank())
}

func (c *ring) writeReason(err error) string {
	switch {
	case isTimeout(err):
		return fmt.Sprintf("read nothing from rank %d for %v (hung, or issuing a different collective; raise %s if it is only slow)", c.worldRank(), 2*c.opts.OpTimeout, c.opts.TimeoutName)
	case isClosedByPeer(err):
		return "closed its connection in the middle of the collective (the process died, or closed its communicator)"
	}
	return fmt.Sprintf("rank %d could not send to it", c.worldRank())
}

// ctxErr is ctx.Err(), or DeadlineExceeded once ctx's deadline has passed: the
// connection deadline derived from it can fire before the context's own timer.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isClosedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

package comm

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
)

// bufioBytes sizes the reader and writer on each ring connection; payload frames
// larger than this bypass the buffer (bufio writes and reads them directly).
const bufioBytes = 64 << 10

// Dial builds the world communicator from a worker's rendezvous Info: rank 0 serves
// the rendezvous store on MASTER_PORT (all interfaces), every rank publishes a ring
// listener on the interface that reaches MASTER_ADDR, and each rank then connects to
// rank+1 and accepts rank-1. A world of one needs no network at all.
func Dial(ctx context.Context, info rendezvous.Info, opts Options) (Communicator, error) {
	opts = opts.withDefaults()
	if err := checkTransport(opts.Transport); err != nil {
		return nil, err
	}
	if opts.Node == "" {
		opts.Node = fmt.Sprintf("%s/node%d", nodeID(hostName(opts)), info.NodeRank)
	}
	if info.WorldSize == 1 {
		return newRing(ctx, 0, []rendezvous.Peer{{Rank: 0, Host: hostName(opts)}}, "", nil, "", opts)
	}
	var served chan error
	if info.Rank == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(info.MasterPort)))
		if err != nil {
			return nil, fmt.Errorf("comm: rank 0 cannot serve the rendezvous store on port %d: %w (another job may hold MASTER_PORT=%d; choose another)",
				info.MasterPort, err, info.MasterPort)
		}
		served = make(chan error, 1)
		srv := rendezvous.Server{WorldSize: info.WorldSize, Timeout: opts.ConnectTimeout, Addr: info.StoreAddr()}
		go func() {
			_, err := srv.Serve(ctx, ln)
			served <- err
		}()
	}
	c, err := Join(ctx, info.StoreAddr(), info.Rank, info.WorldSize, opts)
	if served != nil {
		if serr := <-served; serr != nil && err == nil {
			c.Close()
			err = serr
		}
	}
	return c, err
}

// Join is Dial for a store served elsewhere (tests, or a launcher that runs its own):
// it registers rank of size at storeAddr and opens the ring.
func Join(ctx context.Context, storeAddr string, rank, size int, opts Options) (Communicator, error) {
	opts = opts.withDefaults()
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("comm: rank %d is outside a world of %d", rank, size)
	}
	if err := checkTransport(opts.Transport); err != nil {
		return nil, err
	}
	if opts.Node == "" {
		opts.Node = nodeID(hostName(opts))
	}
	cl, err := rendezvous.Connect(ctx, storeAddr, opts.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// Listen where rank 0's host is reachable from: the interface this rank's store
	// connection left from.
	ip := "127.0.0.1"
	if a, ok := cl.LocalAddr().(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("comm: rank %d cannot listen on %s for its ring peer: %w", rank, ip, err)
	}
	table, err := cl.Exchange(ctx, rendezvous.Peer{Rank: rank, Host: hostName(opts), Addr: ln.Addr().String(), Node: opts.Node}, size)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if shmGroup(opts, table.Peers) {
		ln.Close()
		return newShm(ctx, rank, table.Peers, table.ID, opts, nil)
	}
	if opts.Transport == TransportShm && !oneNode(table.Peers) {
		ln.Close()
		first, other := table.Peers[0], table.Peers[0]
		for _, p := range table.Peers {
			if p.Node != first.Node {
				other = p
				break
			}
		}
		return nil, fmt.Errorf("comm: transport shm needs every rank on one node, but %v is on node %q and %v on %q (use transport auto: shared memory within each node, TCP between)",
			first, first.Node, other, other.Node)
	}
	return newRing(ctx, rank, table.Peers, table.ID, ln, ip, opts)
}

func hostName(opts Options) string {
	if opts.Host != "" {
		return opts.Host
	}
	h, err := os.Hostname()
	if err != nil {
		return "unknown-host"
	}
	return h
}

// helloMagic opens a ring connection, distinct from frameMagic.
const helloMagic = 0xF5DC

// hello is the first message on a ring connection: who is calling, for which group.
func hello(from, size int, id string) []byte {
	b := make([]byte, 12+len(id))
	binary.LittleEndian.PutUint16(b[0:], helloMagic)
	b[2] = wireVersion
	binary.LittleEndian.PutUint32(b[4:], uint32(from))
	binary.LittleEndian.PutUint16(b[8:], uint16(size))
	binary.LittleEndian.PutUint16(b[10:], uint16(len(id)))
	copy(b[12:], id)
	return b
}

// readHello reads a hello and returns the caller's rank, or an error for a
// connection that is not from this group.
func readHello(conn net.Conn, size int, id string) (int, error) {
	var b [12]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint16(b[0:]) != helloMagic || b[2] != wireVersion {
		return 0, errors.New("not a gotrain ring hello (or another fsdpbench version)")
	}
	from := int(binary.LittleEndian.Uint32(b[4:]))
	gotSize := int(binary.LittleEndian.Uint16(b[8:]))
	gotID := make([]byte, binary.LittleEndian.Uint16(b[10:]))
	if _, err := io.ReadFull(conn, gotID); err != nil {
		return 0, err
	}
	if string(gotID) != id || gotSize != size {
		return 0, fmt.Errorf("hello for group %q of %d, this is group %q of %d", gotID, gotSize, id, size)
	}
	return from, nil
}

// newRing connects rank to rank+1 and accepts rank-1 on ln (which it closes).
func newRing(ctx context.Context, rank int, peers []rendezvous.Peer, id string, ln net.Listener, listenIP string, opts Options) (*ring, error) {
	size := len(peers)
	if size > 1<<16-1 {
		return nil, fmt.Errorf("comm: a group of %d ranks is larger than the ring supports (65535)", size)
	}
	c := &ring{rank: rank, size: size, peers: peers, id: id, listenIP: listenIP, opts: opts}
	if size == 1 {
		if ln != nil {
			ln.Close()
		}
		return c, nil
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	prevRank, nextRank := mod(rank-1, size), mod(rank+1, size)
	deadline, _ := ctx.Deadline()

	type accepted struct {
		conn net.Conn
		err  error
	}
	acc := make(chan accepted, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				acc <- accepted{err: err}
				return
			}
			_ = conn.SetDeadline(deadline)
			from, err := readHello(conn, size, id)
			if err != nil {
				conn.Close() // a stray connection: keep waiting for prev
				continue
			}
			if from != prevRank {
				conn.Close()
				acc <- accepted{err: fmt.Errorf("%v connected as rank %d's predecessor, expected %v", peers[from], rank, peers[prevRank])}
				return
			}
			acc <- accepted{conn: conn}
			return
		}
	}()

	next, err := dialRetry(ctx, peers[nextRank].Addr)
	if err == nil {
		_ = next.SetDeadline(deadline)
		_, err = next.Write(hello(rank, size, id))
	}
	if err != nil {
		ln.Close()
		if a := <-acc; a.conn != nil {
			a.conn.Close()
		}
		if next != nil {
			next.Close()
		}
		return nil, fmt.Errorf("comm: rank %d could not connect to its ring successor %v within %v: %w", peers[rank].Rank, peers[nextRank], opts.ConnectTimeout, err)
	}
	a := <-acc
	if a.err != nil {
		next.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("comm: %v never connected to rank %d's ring listener %s within %v: %w",
				peers[prevRank], peers[rank].Rank, peers[rank].Addr, opts.ConnectTimeout, ctx.Err())
		}
		return nil, fmt.Errorf("comm: rank %d waiting for its ring predecessor: %w", peers[rank].Rank, a.err)
	}
	c.next, c.prev = next, a.conn
	for _, conn := range []net.Conn{c.next, c.prev} {
		_ = conn.SetDeadline(time.Time{})
		if tc, ok := conn.(*net.TCPConn); ok {
			// Frames are flushed whole; Nagle would hold a frame's tail back.
			_ = tc.SetNoDelay(true)
			if opts.SocketBufferBytes > 0 {
				_ = tc.SetReadBuffer(opts.SocketBufferBytes)
				_ = tc.SetWriteBuffer(opts.SocketBufferBytes)
			}
		}
	}
	c.w = bufio.NewWriterSize(c.next, bufioBytes)
	c.r = bufio.NewReaderSize(c.prev, bufioBytes)
	c.sendCodec = newCodec(opts.portable, opts.ChunkBytes)
	c.recvCodec = newCodec(opts.portable, opts.ChunkBytes)
	return c, nil
}

func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	backoff := 10 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Split implements Communicator: the ranks exchange (color, key, new listener) around
// the parent ring, and each new group opens its own ring.
func (c *ring) Split(ctx context.Context, color, key int) (Communicator, error) {
	if color < 0 && color != NoColor {
		return nil, fmt.Errorf("comm: split: color %d is negative (use NoColor to opt out)", color)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return nil, err
	}
	start := time.Now()
	c.seq++
	seq := c.seq

	var ln net.Listener
	addr := ""
	if color != NoColor && c.size > 1 {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(c.listenIP, "0")); err != nil {
			return nil, fmt.Errorf("comm: split: rank %d cannot listen on %s: %w", c.worldRank(), c.listenIP, err)
		}
		addr = ln.Addr().String()
	}
	closeLn := func() {
		if ln != nil {
			ln.Close()
		}
	}
	mine := make([]byte, 16, 16+len(addr))
	binary.LittleEndian.PutUint64(mine[0:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	mine = append(mine, addr...)
	records, err := c.allGatherRecords(ctx, seq, mine)
	c.countSplit(start, records, err)
	if err != nil {
		closeLn()
		return nil, err
	}

	type member struct {
		parent, key int
		addr        string
	}
	var group []member
	for r, rec := range records {
		if len(rec) < 16 {
			closeLn()
			return nil, fmt.Errorf("comm: split #%d: %v sent a %d-byte record", seq, c.peers[r], len(rec))
		}
		if int(int64(binary.LittleEndian.Uint64(rec[0:]))) == color {
			group = append(group, member{parent: r, key: int(int64(binary.LittleEndian.Uint64(rec[8:]))), addr: string(rec[16:])})
		}
	}
	if color == NoColor {
		return nil, nil
	}
	slices.SortFunc(group, func(a, b member) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.parent, b.parent)) })
	peers := make([]rendezvous.Peer, len(group))
	newRank := 0
	for i, m := range group {
		parent := c.peers[m.parent]
		peers[i] = rendezvous.Peer{Rank: parent.Rank, Host: parent.Host, Addr: m.addr, Node: parent.Node}
		if m.parent == c.rank {
			newRank = i
		}
	}
	if shmGroup(c.opts, peers) { // a group inside one node of a world that spans nodes
		closeLn()
		sub, err := newShm(ctx, newRank, peers, fmt.Sprintf("%s/%d/%d", c.id, seq, color), c.opts, nil)
		if err != nil {
			return nil, fmt.Errorf("comm: split #%d (color %d): %w", seq, color, err)
		}
		return sub, nil
	}
	sub, err := newRing(ctx, newRank, peers, fmt.Sprintf("%s/%d/%d", c.id, seq, color), ln, c.listenIP, c.opts)
	if err != nil {
		return nil, fmt.Errorf("comm: split #%d (color %d): %w", seq, color, err)
	}
	return sub, nil
}

func (c *ring) countSplit(start time.Time, records [][]byte, err error) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	s := &c.stats.Split
	s.Calls++
	s.Time += time.Since(start)
	if err == nil && c.size > 1 {
		for i, rec := range records {
			if i != c.rank {
				s.BytesReceived += int64(len(rec))
			}
			if i != mod(c.rank+1, c.size) {
				s.BytesSent += int64(len(rec)) // every record but next's passes through
			}
		}
	}
}

// maxRecord bounds a Split record (a color, a key and an address).
const maxRecord = 4096

// allGatherRecords gathers one small byte record per rank around the ring. Records
// are tiny, so each step writes then reads: the frame fits in the socket buffers and
// no sender goroutine is needed.
func (c *ring) allGatherRecords(ctx context.Context, seq uint64, mine []byte) ([][]byte, error) {
	out := make([][]byte, c.size)
	out[c.rank] = mine
	if c.size == 1 {
		return out, nil
	}
	readDeadline, hardCap := c.deadlines(ctx)
	p := newProgress(c.stallInterval(), hardCap)
	defer p.finish()
	failed := func(o outcome) error {
		p.finish()
		return c.fail(ctx, KindSplit, seq, o)
	}
	if err := errors.Join(c.next.SetWriteDeadline(hardCap), c.prev.SetReadDeadline(readDeadline)); err != nil {
		return nil, failed(outcome{recvErr: err})
	}
	unwatch := context.AfterFunc(ctx, func() {
		p.force(c.prev.SetReadDeadline)
		p.force(c.next.SetWriteDeadline)
	})
	defer unwatch()

	cur := mine
	for s := 0; s < c.size-1; s++ {
		header{kind: KindSplit, payload: uint32(len(cur)), seq: seq, frame: uint32(s)}.put(c.hdrW[:])
		_, err := c.w.Write(c.hdrW[:])
		if err == nil {
			_, err = c.w.Write(cur)
		}
		if err == nil {
			err = c.w.Flush()
		}
		if err != nil {
			return nil, failed(outcome{sendErr: err, sendDirty: true, forced: p.wasForced()})
		}
		h, err := c.nextHeader(p)
		if err != nil {
			return nil, failed(outcome{recvErr: err, forced: p.wasForced()})
		}
		want := header{kind: KindSplit, payload: min(h.payload, maxRecord), seq: seq, frame: uint32(s)}
		if h != want {
			return nil, failed(outcome{recvErr: &desyncError{got: h, want: want}})
		}
		rec := make([]byte, h.payload)
		if _, err := io.ReadFull(c.r, rec); err != nil {
			return nil, failed(outcome{recvErr: err, forced: p.wasForced()})
		}
		out[mod(c.rank-s-1, c.size)] = rec
		cur = rec
	}
	return out, nil
}

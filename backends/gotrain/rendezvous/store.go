package rendezvous

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout is how long the store waits for every rank, and a rank for the
// store, when no timeout is given. It is generous because workers of a job start at
// different times (a slow node, a container pull).
const DefaultTimeout = 5 * time.Minute

// Peer is what one rank publishes: where its collective-communication listener is.
type Peer struct {
	Rank int `json:"rank"`
	// Host is the rank's host name, for error messages.
	Host string `json:"host"`
	// Addr is the rank's listener, "ip:port".
	Addr string `json:"addr"`
	// Node identifies the rank's node: ranks with equal Node can share memory.
	// Empty means unknown (no sharing).
	Node string `json:"node,omitempty"`
}

// String names the peer for error messages: "rank 2 (node03, 10.0.0.3:41234)".
func (p Peer) String() string {
	return fmt.Sprintf("rank %d (%s, %s)", p.Rank, p.Host, p.Addr)
}

// Table is the store's answer: every rank's Peer, indexed by rank.
type Table struct {
	// ID is random, chosen by the store: ring connections carry it so that a stray
	// connection from another job is recognised and refused.
	ID    string `json:"id"`
	Peers []Peer `json:"peers"`
}

// joinMsg is a rank's request, one JSON line.
type joinMsg struct {
	Peer      Peer `json:"peer"`
	WorldSize int  `json:"world_size"`
}

// replyMsg is the store's answer, one JSON line: the table or why there is none.
type replyMsg struct {
	Table *Table `json:"table,omitempty"`
	Error string `json:"error,omitempty"`
}

// Server collects one Peer from each of WorldSize ranks and sends every rank the
// full Table.
type Server struct {
	WorldSize int
	// Timeout bounds the wait for all ranks; 0 means DefaultTimeout.
	Timeout time.Duration
	// Addr is the address the ranks were told to connect to (MASTER_ADDR:MASTER_PORT),
	// used in error messages; empty means the listener's own address.
	Addr string
}

// joined is one accepted rank, or the error of a connection that failed to join.
type joined struct {
	conn net.Conn
	msg  joinMsg
	err  error
}

// Serve runs the rendezvous on ln until every rank has joined and received the table,
// the timeout passes (the error names the ranks that never came) or ctx ends. It
// closes ln before returning. A rank that joins twice or disagrees on the world size
// fails the whole rendezvous, and every connected rank is told why.
func (s Server) Serve(ctx context.Context, ln net.Listener) (Table, error) {
	defer ln.Close()
	if s.WorldSize < 1 {
		return Table{}, fmt.Errorf("rendezvous: world size %d, want at least 1", s.WorldSize)
	}
	timeout := orDefault(s.Timeout, DefaultTimeout)
	addr := s.Addr
	if addr == "" {
		addr = ln.Addr().String()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()

	arrivals := make(chan joined)
	go func() { // accepts until Serve closes ln
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				msg, err := readJoin(conn, deadline)
				select {
				case arrivals <- joined{conn: conn, msg: msg, err: err}:
				case <-ctx.Done():
					conn.Close()
				}
			}()
		}
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	conns := make([]net.Conn, s.WorldSize)
	peers := make([]Peer, s.WorldSize)
	fail := func(err error) (Table, error) {
		for _, c := range conns {
			if c != nil {
				writeReply(c, replyMsg{Error: err.Error()}, time.Now().Add(time.Second))
				c.Close()
			}
		}
		return Table{}, err
	}
	for remaining := s.WorldSize; remaining > 0; {
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fail(fmt.Errorf("rendezvous timed out after %v: %s of %d never connected to %s (did they start, and do they use the same MASTER_ADDR/MASTER_PORT?)",
					timeout, missingRanks(conns), s.WorldSize, addr))
			}
			return fail(fmt.Errorf("rendezvous at %s stopped before %s of %d connected: %w", addr, missingRanks(conns), s.WorldSize, ctx.Err()))
		case j := <-arrivals:
			if j.err != nil { // a stray or broken connection: not a rank, keep waiting
				j.conn.Close()
				continue
			}
			r := j.msg.Peer.Rank
			var bad error
			switch {
			case j.msg.WorldSize != s.WorldSize:
				bad = fmt.Errorf("rendezvous: rank %d (%s) has world size %d but rank 0 has %d: every rank needs the same WORLD_SIZE",
					r, j.msg.Peer.Host, j.msg.WorldSize, s.WorldSize)
			case r < 0 || r >= s.WorldSize:
				bad = fmt.Errorf("rendezvous: a rank on %s says it is rank %d, outside 0..%d", j.msg.Peer.Host, r, s.WorldSize-1)
			case conns[r] != nil:
				bad = fmt.Errorf("rendezvous: rank %d joined twice (from %s and from %s): every process needs a distinct RANK",
					r, peers[r].Host, j.msg.Peer.Host)
			}
			if bad != nil {
				writeReply(j.conn, replyMsg{Error: bad.Error()}, time.Now().Add(time.Second))
				j.conn.Close()
				return fail(bad)
			}
			conns[r], peers[r] = j.conn, j.msg.Peer
			remaining--
		}
	}

	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails on supported platforms
	table := Table{ID: hex.EncodeToString(id[:]), Peers: peers}
	var errs []error
	for r, c := range conns {
		if err := writeReply(c, replyMsg{Table: &table}, deadline); err != nil {
			errs = append(errs, fmt.Errorf("sending the table to %v: %w", peers[r], err))
		}
		c.Close()
	}
	return table, errors.Join(errs...)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// missingRanks formats the ranks that have not joined: "ranks 2, 3" or "rank 1".
func missingRanks(conns []net.Conn) string {
	var missing []string
	for r, c := range conns {
		if c == nil {
			missing = append(missing, strconv.Itoa(r))
		}
	}
	if len(missing) == 1 {
		return "rank " + missing[0]
	}
	return "ranks " + strings.Join(missing, ", ")
}

// maxMsgBytes bounds one protocol line; a peer entry is far smaller.
const maxMsgBytes = 1 << 20

func readJoin(conn net.Conn, deadline time.Time) (joinMsg, error) {
	var msg joinMsg
	if err := conn.SetReadDeadline(deadline); err != nil {
		return msg, err
	}
	line, err := readLine(bufio.NewReader(conn))
	if err != nil {
		return msg, err
	}
	if err := json.Unmarshal(line, &msg); err != nil {
		return msg, fmt.Errorf("not a rendezvous join message: %w", err)
	}
	return msg, nil
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > maxMsgBytes {
			return nil, fmt.Errorf("message longer than %d bytes", maxMsgBytes)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

func writeReply(conn net.Conn, msg replyMsg, deadline time.Time) error {
	return writeJSONLine(conn, msg, deadline)
}

func writeJSONLine(conn net.Conn, v any, deadline time.Time) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	_, err = conn.Write(append(b, '\n'))
	return err
}

// Client is one rank's connection to the store.
type Client struct {
	conn     net.Conn
	addr     string
	deadline time.Time
	timeout  time.Duration
}

// clientGrace lets the store's own timeout, which names the missing ranks, reach a
// waiting rank before the rank's own deadline fires.
const clientGrace = 5 * time.Second

// Connect dials the store at addr (MASTER_ADDR:MASTER_PORT), retrying until it
// answers, since rank 0 may start after the others; timeout 0 means DefaultTimeout.
func Connect(ctx context.Context, addr string, timeout time.Duration) (*Client, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	backoff := 20 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return &Client{conn: conn, addr: addr, deadline: deadline.Add(clientGrace), timeout: timeout}, nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, fmt.Errorf("rendezvous: could not reach the store at %s within %v (rank 0 serves it: is rank 0 running, and do all ranks use the same MASTER_ADDR/MASTER_PORT?): %w",
					addr, timeout, err)
			}
			return nil, fmt.Errorf("rendezvous: connecting to the store at %s: %w", addr, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// LocalAddr is this end of the store connection: its IP is the interface that reaches
// rank 0's host, the one to listen on for peers.
func (c *Client) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Exchange publishes self and waits for the table of all worldSize ranks.
func (c *Client) Exchange(ctx context.Context, self Peer, worldSize int) (Table, error) {
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := writeJSONLine(c.conn, joinMsg{Peer: self, WorldSize: worldSize}, c.deadline); err != nil {
		return Table{}, c.wrap(ctx, "sending this rank's entry", err)
	}
	if err := c.conn.SetReadDeadline(c.deadline); err != nil {
		return Table{}, c.wrap(ctx, "waiting for the table", err)
	}
	line, err := readLine(bufio.NewReader(c.conn))
	if err != nil {
		return Table{}, c.wrap(ctx, "waiting for the table", err)
	}
	var reply replyMsg
	if err := json.Unmarshal(line, &reply); err != nil {
		return Table{}, fmt.Errorf("rendezvous: the store at %s sent a malformed reply: %w", c.addr, err)
	}
	switch {
	case reply.Error != "":
		return Table{}, fmt.Errorf("rendezvous: the store at %s (rank 0) says: %s", c.addr, reply.Error)
	case reply.Table == nil || len(reply.Table.Peers) != worldSize:
		return Table{}, fmt.Errorf("rendezvous: the store at %s sent a table without %d peers", c.addr, worldSize)
	}
	for r, p := range reply.Table.Peers {
		if p.Rank != r {
			return Table{}, fmt.Errorf("rendezvous: the store at %s sent entry %d for rank %d", c.addr, r, p.Rank)
		}
	}
	return *reply.Table, nil
}

func (c *Client) wrap(ctx context.Context, doing string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("rendezvous: %s from %s: %w", doing, c.addr, ctx.Err())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("rendezvous: %s from %s: no answer within %v (the store on rank 0 reports which ranks are missing)", doing, c.addr, c.timeout)
	}
	return fmt.Errorf("rendezvous: %s from %s: %w (did rank 0 exit?)", doing, c.addr, err)
}

// Close closes the connection to the store.
func (c *Client) Close() error { return c.conn.Close() }

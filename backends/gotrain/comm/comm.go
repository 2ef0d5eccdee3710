// Package comm holds the gotrain trainer's collective communication: the
// Communicator interface that fsdp/ programs against, and its TCP ring
// implementation between processes (the CPU path; a cuda/NCCL communicator will
// implement the same operations on device buffers).
//
// # Transports
//
// A group whose ranks all share a node (Options.Node, from the rendezvous) runs on
// shared memory instead of TCP (shm.go): a segment every rank maps, through
// which rounds of every collective pass. A group spanning nodes is a plain TCP ring, and its Split gives
// shared-memory groups to the ranks of one node (hybrid_shard's shard groups).
// Options.Transport forces TCP to compare. Numerics, ordering and failure
// reporting below hold for both.
//
// # Ordering
//
// As with NCCL and MPI, every rank of a communicator must issue the same collectives
// in the same order with the same sizes. A Communicator may be called from any
// goroutine (fsdp prefetch issues the next unit's all-gather on its own goroutine
// while compute runs on another) and calls are serialised, but when two goroutines
// issue collectives on one communicator, their order can differ between ranks; a
// second stream of collectives needs a second communicator (Split with the same
// color on every rank duplicates one). Communicators that enqueue on a device
// stream (StreamCollectives) are instead started from one goroutine in program
// order, since communicators sharing a stream must be enqueued in the same order
// on every rank. A rank that issues a different collective, or
// a different size, is detected from the frame header (kind, sequence number,
// length) and every rank gets an error saying so, never garbage.
//
// # Numerics
//
// The TCP ring reduces each segment of a buffer in ring order: segment j is summed
// as ((x[j+1] + x[j+2]) + ...) + x[j] (ranks modulo the size), so results are
// bitwise identical from run to run and on every rank, but differ in the last bits
// from a sequential or tree sum over ranks 0..n-1. Average divides the sum by the
// size once (sum / float32(size)), on the rank that owns the segment, before the
// result is shared.
//
// # Failure
//
// Every collective is bounded in time: a peer that dies is noticed as soon as its
// sockets close (EOF, connection reset), a peer that hangs after Options.OpTimeout,
// and a cancelled ctx ends the call at once and tells the peers. The rank that notices sends an abort frame to the next rank, which
// passes it on, so every rank's error is a *PeerError naming the failed rank and its
// host, not the neighbour it happened to be waiting for; a rank whose previous rank
// is alive but itself waiting (it sends stall frames to say so) waits for that abort
// rather than blaming its neighbour. After a failure the rank keeps draining its
// previous rank, so that nobody upstream blocks on it. After any error a
// communicator is unusable (like an aborted NCCL communicator): close it.
//
// # Device buffers
//
// The TCP ring works on host []float32. fsdp reaches collectives on its device's
// buffers through BufferCollectives (OnBuffers): a communicator on device memory
// (comm/nccl) implements it on device pointers, and every other one, the ring
// included, runs on the buffers' host views (device.HostBuffer), without copies.
package comm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Communicator is a group of ranks that run collectives together.
type Communicator interface {
	// Rank is this process's rank in the group, 0 ≤ Rank < Size.
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// AllGather gathers every rank's src (n elements, the same n on every rank) into
	// dst (n×Size elements) in rank order.
	AllGather(ctx context.Context, dst, src []float32) error
	// ReduceScatter reduces src (n×Size elements) over the ranks with op and leaves
	// chunk Rank of the result (n elements) in dst. src is not modified.
	ReduceScatter(ctx context.Context, dst, src []float32, op Op) error
	// AllReduce reduces buf over the ranks with op, in place; buf's length need not
	// be a multiple of Size.
	AllReduce(ctx context.Context, buf []float32, op Op) error
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf []float32, root int) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Split partitions the group like MPI_Comm_split / ncclCommSplit: ranks that pass
	// the same color form a new communicator, ranked by (key, old rank). A rank that
	// passes NoColor takes part in the exchange but gets a nil Communicator. Every
	// rank must call Split (it is a collective of the parent).
	Split(ctx context.Context, color, key int) (Communicator, error)
	// Stats is what this communicator has moved so far.
	Stats() Stats
	// Close releases the connections. Collectives in flight return errors.
	Close() error
}

// NoColor passed to Split leaves the rank out of every new group.
const NoColor = -1

// Op is a reduction.
type Op int

// Reductions.
const (
	Sum Op = iota
	Average
)

// String is the op's name.
func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Average:
		return "average"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Kind is a collective operation, as counted in Stats and carried in frame headers.
type Kind uint8

// Collective kinds. The zero value is invalid, so that a zeroed header never passes.
const (
	KindAllGather Kind = iota + 1
	KindReduceScatter
	KindAllReduce
	KindBroadcast
	KindBarrier
	KindSplit
	kindAbort // not a collective: a peer's failure travelling around the ring
	kindStall // not a collective: "alive, and waiting for my previous rank"
)

// String is the kind's name, as in reports ("all_gather").
func (k Kind) String() string {
	switch k {
	case KindAllGather:
		return "all_gather"
	case KindReduceScatter:
		return "reduce_scatter"
	case KindAllReduce:
		return "all_reduce"
	case KindBroadcast:
		return "broadcast"
	case KindBarrier:
		return "barrier"
	case KindSplit:
		return "split"
	case kindAbort:
		return "abort"
	case kindStall:
		return "stall"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// OpStats counts one kind of collective on one rank.
type OpStats struct {
	Calls int64 `json:"calls"`
	// BytesSent and BytesReceived count payload bytes on the wire (this rank's
	// sends to and receives from its ring neighbours), not frame headers. For an
	// all-gather of n float32 per rank that is 4n(Size-1) each way.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// BytesSentInterNode is the part of BytesSent that went to a neighbour on another
	// host (Peer.Host differs): what crossed the link between nodes.
	BytesSentInterNode int64 `json:"bytes_sent_inter_node"`
	// Time is the wall time spent inside the calls, waiting for peers included.
	Time time.Duration `json:"time_ns"`
}

// Add returns the field-wise sum.
func (s OpStats) Add(o OpStats) OpStats {
	return OpStats{Calls: s.Calls + o.Calls, BytesSent: s.BytesSent + o.BytesSent,
		BytesReceived: s.BytesReceived + o.BytesReceived, BytesSentInterNode: s.BytesSentInterNode + o.BytesSentInterNode,
		Time: s.Time + o.Time}
}

// Stats is what a communicator has moved, per kind of collective.
type Stats struct {
	AllGather     OpStats `json:"all_gather"`
	ReduceScatter OpStats `json:"reduce_scatter"`
	AllReduce     OpStats `json:"all_reduce"`
	Broadcast     OpStats `json:"broadcast"`
	Barrier       OpStats `json:"barrier"`
	Split         OpStats `json:"split"`
	// BufferBytes is the most host memory the communicator held at once in staging
	// buffers (receive staging, reduce-scatter scratch): the "communication buffers"
	// of a memory report.
	BufferBytes int64 `json:"buffer_bytes"`
}

// Of returns the counters of one kind.
func (s *Stats) Of(k Kind) *OpStats {
	switch k {
	case KindAllGather:
		return &s.AllGather
	case KindReduceScatter:
		return &s.ReduceScatter
	case KindAllReduce:
		return &s.AllReduce
	case KindBroadcast:
		return &s.Broadcast
	case KindBarrier:
		return &s.Barrier
	case KindSplit:
		return &s.Split
	}
	return nil
}

// Add returns the sum of two Stats (a rank's shard group plus its replicate group);
// BufferBytes add too, since both groups hold their buffers at once.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		AllGather:     s.AllGather.Add(o.AllGather),
		ReduceScatter: s.ReduceScatter.Add(o.ReduceScatter),
		AllReduce:     s.AllReduce.Add(o.AllReduce),
		Broadcast:     s.Broadcast.Add(o.Broadcast),
		Barrier:       s.Barrier.Add(o.Barrier),
		Split:         s.Split.Add(o.Split),
		BufferBytes:   s.BufferBytes + o.BufferBytes,
	}
}

// ErrClosed is returned by collectives on a closed communicator.
var ErrClosed = errors.New("comm: communicator is closed")

// PeerError reports a collective that failed because of another rank: it died (its
// connection closed), hung (no data within the op timeout), cancelled, or issued a
// different collective. Every rank of the group reports the same failed rank.
type PeerError struct {
	// Op and Seq identify the collective (Seq counts this communicator's
	// collectives from 1).
	Op  Kind
	Seq uint64
	// Rank, Host and Addr name the failed peer; Rank is its rank in the world group
	// and GroupRank its rank in this communicator.
	Rank      int
	GroupRank int
	Host      string
	Addr      string
	// Reason says what happened, as seen by the rank that noticed.
	Reason string
	// ReportedBy is the world rank that noticed the failure (this rank, or a peer
	// whose abort frame came around the ring).
	ReportedBy int
	// Err is the underlying error on the rank that noticed; nil when the report came
	// from a peer.
	Err error
}

// Error names the failed peer first, since that is what a user needs to look at.
func (e *PeerError) Error() string {
	msg := fmt.Sprintf("comm: %s #%d: rank %d", e.Op, e.Seq, e.Rank)
	if e.GroupRank != e.Rank {
		msg += fmt.Sprintf(" (group rank %d)", e.GroupRank)
	}
	msg += fmt.Sprintf(" on %s (%s): %s", e.Host, e.Addr, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + fmt.Sprintf(" [reported by rank %d]", e.ReportedBy)
}

// Unwrap is the underlying error.
func (e *PeerError) Unwrap() error { return e.Err }

// Options tune a TCP communicator. The zero value is usable.
type Options struct {
	// OpTimeout bounds the wait for a peer within one collective (ctx's deadline, if
	// sooner, wins): a previous rank that sends nothing for this long is reported as
	// hung. A rank whose previous rank is alive but itself waiting (it says so with
	// stall frames) waits up to twice as long, so that the abort frame from the rank
	// right after the hung one reaches it and names the right rank. 0 means
	// DefaultOpTimeout.
	OpTimeout time.Duration
	// TimeoutName is how a hung-peer error tells the user to raise OpTimeout (the
	// setting that sets it, e.g. "backend_options.collective_timeout"). Empty means
	// "the op timeout".
	TimeoutName string
	// ConnectTimeout bounds the rendezvous and the opening of the ring (also for
	// Split). 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ChunkBytes is the pipelining unit: large buffers stream as frames of this size,
	// each forwarded as soon as it arrives. 0 means DefaultChunkBytes.
	ChunkBytes int
	// SocketBufferBytes, when positive, sets SO_SNDBUF and SO_RCVBUF. The default (0)
	// leaves Linux's buffer autotuning on: it grows loopback and LAN buffers up to
	// net.ipv4.tcp_rmem's maximum (32 MiB on the CI machine), whereas an explicit size
	// turns autotuning off and is capped at net.core.rmem_max (4 MiB there); in the ring
	// all-gather benchmark at world size 4 on loopback, autotuning gave about 1.05
	// GB/s busbw against 0.84 with 4 MiB buffers.
	SocketBufferBytes int
	// Host names this rank in peers' error messages; empty means os.Hostname.
	Host string
	// Transport is TransportAuto (or empty), TransportShm or TransportTCP: whether
	// ranks on one node exchange data through shared memory or the TCP ring.
	Transport string
	// Node names this rank's node: ranks with equal Node share memory. Empty
	// means the host name and the kernel's boot id, and for Dial the launcher's
	// node rank too (so that a launch that says "two nodes" gets two, even on one
	// machine).
	Node string
	// ShmDir is where shared-memory segments are made (each exists under its name
	// only while its group sets up); empty means DefaultShmDir.
	ShmDir string
	// ShmArenaBytes bounds the part of each shared-memory segment that holds
	// buffers the ranks share (SharedGatherer): 0 means DefaultShmArenaBytes,
	// negative none (every all-gather copies). Its pages are reserved only as
	// buffers are handed out.
	ShmArenaBytes int64

	// portable forces the byte-by-byte wire encoding that big-endian machines use,
	// so that tests cover it on little-endian ones.
	portable bool
}

// Defaults for Options.
const (
	DefaultOpTimeout      = 10 * time.Minute // torch's default process-group timeout for NCCL
	DefaultConnectTimeout = 5 * time.Minute
	DefaultChunkBytes     = 1 << 20
)

func (o Options) withDefaults() Options {
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.TimeoutName == "" {
		o.TimeoutName = "the op timeout"
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	o.ChunkBytes = max(o.ChunkBytes/4*4, 4)
	return o
}

// Package nccl is the gotrain trainer's NCCL communicator: comm.Communicator and
// comm.BufferCollectives over libnccl.so.2, loaded at run time through dynload
// (no NCCL header or library at build time), with a watchdog that turns NCCL's
// asynchronous errors and hangs into a failed run naming the rank.
//
// The declarations below are written from NCCL's public API (nccl.h): the
// library is reached only through function pointers found with dlsym, each
// called by a small C trampoline, so an older NCCL that lacks an optional
// symbol (ncclCommSplit before 2.18.1) still loads and the feature is gated on
// ncclGetVersion.
//
// Besides the NCCL communicator, each group keeps a TCP ring (comm's) as its
// control plane, like PyTorch's ProcessGroupNCCL keeps its store: it carries the
// ncclUniqueId from rank 0 (the ring itself was set up through the rendezvous
// store), the color exchange of Split, and, after a collective fails, each
// rank's status, so that every rank names the same failed rank.
//
// A build without cgo (CGO_ENABLED=0) cannot load libnccl: there Load fails
// saying so (nocgo.go) and a run that asks for comm: nccl is refused; the TCP
// ring (comm) needs no cgo.
package nccl

import "time"

// Stream is the CUDA stream collectives are issued on (the cuda device's
// communication stream).
type Stream interface {
	// Handle is the CUstream, passed to NCCL as its cudaStream_t.
	Handle() uintptr
	// Done reports, without blocking, whether everything issued on the
	// stream so far has finished (cuStreamQuery), or the device's error.
	Done() (bool, error)
}

// Staging moves host slices through device memory, for the collectives the
// trainer runs on host data (the step's loss, the gradient norm) when NCCL
// works on device memory.
type Staging interface {
	// Scratch returns device memory for at least n float32 elements; it stays
	// valid until the next Scratch call.
	Scratch(n int) (uintptr, error)
	// ToDevice and ToHost copy and return when the copy is done.
	ToDevice(dst uintptr, src []float32) error
	ToHost(dst []float32, src uintptr) error
}

// Options tune an NCCL communicator. The zero value is usable.
type Options struct {
	// Timeout bounds one collective: past it the watchdog aborts the
	// communicator and the run fails naming the rank. 0 means
	// comm.DefaultOpTimeout.
	Timeout time.Duration
	// ConnectTimeout bounds the rendezvous and communicator setup; 0 means
	// comm.DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Poll is how often the watchdog checks ncclCommGetAsyncError and the
	// deadline; 0 means DefaultPoll.
	Poll time.Duration
	// Stream is where collectives run; nil is stream 0 with a host-memory
	// library (the test fake), whose collectives are done when they return.
	Stream Stream
	// Staging carries host-slice collectives through device memory; nil passes
	// host pointers, which only a host-memory library accepts.
	Staging Staging
}

// DefaultPoll is the watchdog's period: short against a collective timeout,
// long enough to cost nothing.
const DefaultPoll = 10 * time.Millisecond

package device

// Stream names one of a device's streams.
type Stream int

const (
	// ComputeStream runs every Device op.
	ComputeStream Stream = iota
	// CommStream runs collectives on device buffers (NCCL), so that communication
	// overlaps compute.
	CommStream
)

// Event marks the work issued on a stream up to some point.
type Event interface{}

// Streams is implemented by devices whose ops run asynchronously on a compute
// stream and that have a second stream for communication (cuda). fsdp
// type-asserts it for prefetch overlap; a device without it (cpu) runs
// everything in issue order, which is always correct. The rules are CUDA's:
// work on one stream runs in issue order; work on two streams is ordered only
// through events. A buffer written on one stream and read on the other needs
// Wait on the reader's stream for an event recorded after the write; a buffer
// freed after use on the comm stream needs the compute stream to have waited
// for that use first (the allocator reuses memory in compute-stream order), or
// FreeAfter with an event recorded after that use.
type Streams interface {
	// Record returns an event that completes when the work issued on s so far has.
	Record(s Stream) Event
	// Wait makes work issued on s from now on wait for e, without blocking the host.
	Wait(s Stream, e Event)
	// WaitHost blocks the caller until e has completed.
	WaitHost(e Event) error
	// Release returns e to the device; e must not be used afterwards.
	Release(e Event)
	// FreeAfter is Free for a buffer whose last use was on another stream than
	// the compute stream (the input of a reduce-scatter on the comm stream): the
	// accounting is released now, as Free does (so the tracker's figures are the
	// cpu device's at the same point of the program), and the memory goes back
	// to the allocator only once e, recorded after that last use, has completed,
	// so the compute stream cannot reuse it while the other stream still reads
	// it, and does not have to wait for that stream either. FreeAfter takes e
	// over: the caller must not use or Release it afterwards.
	FreeAfter(b Buffer, e Event)
}

// FusedCrossEntropy is implemented by devices with a one-pass cross-entropy (the
// cuda device): CrossEntropyForward(losses, logits, ...) then
// CrossEntropyBackward(dlogits, logits, ..., scale) in one call, reading the
// logits once for both; dlogits may be logits. The model's training forward uses
// it, so the head's backward finds the gradient already in place.
type FusedCrossEntropy interface {
	CrossEntropyFused(losses, dlogits, logits Buffer, targets []int32, vocab int, scale float32)
}

// FusedOps is implemented by devices that fuse the transformer block's
// element-wise ops into their neighbours (the cuda device), saving a launch and a
// pass over memory each. The model uses them when the device has them (and
// model.Model.Unfused is false); the cpu device keeps the reference sequence of
// plain ops, which defines what each fused op computes:
//
//   - RoPEQK(q, k, sq, sk, inverse) is RoPEForward(q, sq) and RoPEForward(k, sk)
//     (RoPEBackward of both when inverse), sq and sk alike but for Heads.
//   - ResidualRMSNorm(out, rstd, x, resid, weight, ...) is Add(x, resid, 1) then
//     RMSNormForward(out, rstd, x, weight, ...): the residual connection and the
//     next norm, so the model writes a branch's output projection into x (beta 0)
//     instead of copying the residual stream there first.
//   - SwiGLUPackedForward(out, gu, rows, inter) is SwiGLUForward(out, gate, up)
//     where gu ([rows, 2·inter]) holds each row's gate then its up: the output of
//     one GEMM by the gate and up weights, which lie next to each other in a
//     block's flat parameters. SwiGLUPackedBackward adds dgate and dup into dgu,
//     laid out as gu.
type FusedOps interface {
	RoPEQK(q, k Buffer, sq, sk RoPEShape, inverse bool)
	ResidualRMSNorm(out, rstd, x, resid, weight Buffer, rows, dim int, eps float32)
	SwiGLUPackedForward(out, gu Buffer, rows, inter int)
	SwiGLUPackedBackward(dgu, dout, gu Buffer, rows, inter int)
}

// ExtraMemory is implemented by devices that hold memory beyond the tracked
// buffers (an allocator's slack, library workspaces, the context): bytes by name,
// reported next to the tracker's figures and never mixed into them.
type ExtraMemory interface {
	ExtraMemory() map[string]int64
}

// Package fsdp is the Go trainer's data-parallel engine for one rank: Fully Sharded
// Data Parallel as PyTorch defines it (full_shard, shard_grad_op, hybrid_shard,
// no_shard) and DDP, over model/'s units, device/'s buffers and comm/'s collectives.
//
// Every wrap unit of the model (the embedding, each block, the head) is one flat
// parameter, padded at its end to a multiple of the shard group's size and split
// evenly: this rank holds its shard (category params), the shard's gradient
// (grads) and AdamW's m and v (optimizer). Around each unit's compute the unit's
// full flat parameter is all-gathered into a transient buffer (category params):
// full_shard gathers before forward and again before backward and frees after each;
// shard_grad_op keeps the forward's gather until the unit's backward. When the
// shard group shares memory on one node and gathers fp32, each unit lives whole
// in the node's shared arena, the shards are the ranks' pieces of it, and the
// all-gather is a barrier that copies nothing (zero-copy gathers, residentUnits);
// the accounting per rank is the same. The unit's
// full gradient (category grads) is reduce-scattered (averaged) into the gradient
// shard right after the unit's backward; hybrid_shard then all-reduces the shard
// across the replicas (the same local rank on every node). no_shard and ddp keep
// full parameters on every rank and all-reduce (average) each unit's gradient
// after its backward; this trainer runs them identically (DDP's bucketing is the
// unit).
//
// Prefetch is real overlap: the next unit's all-gather runs on its own goroutine,
// on a second communicator (a Split of the shard group with one color), while this
// goroutine computes; gradient reduction stays on the first communicator, so the
// two streams of collectives are each in the same order on every rank. On a
// device with a communication stream (cuda with NCCL) the collectives are instead
// enqueued on that stream from this goroutine and ordered against compute by
// events (streams.go).
//
// Gradient accumulation follows PyTorch's no_sync: micro-steps before the last add
// into full (unsharded) unit gradients kept across micro-steps, with no
// communication, so sharded strategies hold a full gradient per unit until the last
// micro-step reduces it (the memory cost no_sync documents).
//
// Mixed precision (Config.MixedPrecision bf16) is FSDP2's
// MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the shards,
// gradient shards and AdamW's moments stay fp32 (the master weights); before each
// all-gather the rank casts its shard to bf16 into its own slot of the gathered
// buffer, so the all-gather moves bf16 (half the bytes) and the gathered
// parameters are bf16 (2 bytes an element, category params); activations and the
// unit's unsharded gradient are bf16 (the model computes in its parameters'
// dtype; row statistics stay fp32); after the unit's backward its bf16 gradient is
// added into an fp32 buffer (category grads) that is reduce-scattered in fp32 into
// the fp32 gradient shard, and no_shard, ddp and hybrid_shard's replicas
// all-reduce fp32. Gradient accumulation adds each micro-step's bf16 gradient into
// that fp32 buffer, as FSDP2's unsharded_accumulated_grad in reduce_dtype: summing
// micro-steps in bf16 would round each partial sum to 8 bits, losing the small
// contributions of later micro-steps.
//
// Data is synthetic and indexed by global sample (model.BatchOf: random tokens,
// or a repeated sequence a model can learn; Config.Data): rank r's
// micro-batch k of step s is samples [s·G + k·W·B + r·B, +B), G = W·B·GradAccum the
// global batch, so a step's global batch, and its loss, do not depend on the world
// size or the strategy.
package fsdp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Config is one rank's training setup. Every rank of a run passes the same Config.
type Config struct {
	// Shape is the model's shape.
	Shape shapes.Shape
	// Sharding is sweeps.FullShard, ShardGradOp, HybridShard, NoShard or DDP.
	Sharding string
	// GPUsPerNode is the size of a node for hybrid_shard: the shard group is
	// GPUsPerNode consecutive ranks, the replicate group the ranks with the same
	// local rank on every node. It must divide the world size. Ignored otherwise.
	GPUsPerNode int
	// BackwardPrefetch is sweeps.BackwardPre, BackwardPost or PrefetchNone ("" is
	// none): when the previous unit's all-gather is issued during full_shard's
	// backward, before or after the current unit's gradient computation.
	BackwardPrefetch string
	// ForwardPrefetch issues the next unit's all-gather before the current unit's
	// forward.
	ForwardPrefetch bool
	// ActivationCheckpointing recomputes each block's forward in its backward.
	ActivationCheckpointing bool
	// GradAccum is the number of micro-steps per optimizer step (0 means 1).
	GradAccum int
	// BatchPerDevice is the samples per rank per micro-step.
	BatchPerDevice int
	// SeqLen is the tokens per sample.
	SeqLen int
	// Seed seeds the initial parameters and the synthetic data.
	Seed uint64
	// Data is the synthetic data set: model.DataRandom ("" too) or
	// model.DataRepeat (model.BatchOf).
	Data string
	// LR, Beta1, Beta2, Eps and WeightDecay are AdamW's (torch.optim.AdamW's names);
	// zero Beta1, Beta2 and Eps default to torch's 0.9, 0.999 and 1e-8.
	LR, Beta1, Beta2, Eps, WeightDecay float64
	// MixedPrecision is sweeps.FP32 ("" is fp32) or sweeps.BF16 (FSDP2's
	// MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); see the package
	// doc). The device must implement device.MixedPrecision for bf16.
	MixedPrecision string
	// GradClip, when positive, scales the gradients so that their global L2 norm
	// (over every shard of every unit) is at most GradClip, as
	// torch.nn.utils.clip_grad_norm_ / FSDP.clip_grad_norm_ do.
	GradClip float64

	// copyGathers turns zero-copy gathers off (tests and benchmarks compare
	// them with the copying all-gathers into shared buffers).
	copyGathers bool
}

// StepReport is one optimizer step, the same on every rank.
type StepReport struct {
	// Step counts optimizer steps from 1.
	Step int
	// Loss is the mean cross-entropy over the step's global batch.
	Loss float64
	// GradNorm is the global gradient norm before clipping (0 when GradClip is off).
	GradNorm float64
	// Time is this rank's wall time for the step.
	Time time.Duration
	// Tokens is the global batch's tokens (every rank's, all micro-steps).
	Tokens int
	// Breakdown is where this rank's step went: computation, collectives and
	// exposed communication by interval unions (timeline.go).
	Breakdown results.StepBreakdown
}

// RankReport is what one rank used.
type RankReport struct {
	Rank int
	// Memory is the device's accounting: Memory.Peak holds the peak bytes per
	// category (params, grads, optimizer, activations, comm).
	Memory device.Stats
	// Comm sums this rank's communicators: the world (the loss, and the shard or
	// replicate group when that is the world) and the groups the trainer split.
	Comm comm.Stats
	// Gathers is how the unit all-gathers moved the parameters so far: one of
	// GathersNone, GathersZeroCopy, GathersShared, GathersCopy.
	Gathers string
}

// How a rank's unit all-gathers ran (RankReport.Gathers).
const (
	// GathersNone: the strategy gathers nothing (no_shard, ddp, a shard group
	// of one), or no step ran yet.
	GathersNone = "none"
	// GathersZeroCopy: in place in the node's shared memory, a barrier each
	// (residentUnits).
	GathersZeroCopy = "zero-copy"
	// GathersShared: into one shared buffer per node, each rank writing its
	// piece (sharedGathered; bf16, or fp32 when the units did not fit).
	GathersShared = "shared"
	// GathersCopy: each rank's own buffer, every piece copied to every rank
	// (TCP, NCCL, or shared memory's rounds when its arena is full).
	GathersCopy = "copy"
)

// UnitLayout is one unit's flat parameter as FSDP splits it.
type UnitLayout struct {
	// Name is the model unit's name ("embedding", "layers.0", "head").
	Name string
	// Size is the unit's elements; Padded is Size rounded up to a multiple of the
	// shard group's size; ShardLen = Padded / shard group size, each rank's part.
	Size, Padded, ShardLen int
}

// Layout is how the units of shape s split over a shard group of shardSize ranks
// (1 for no_shard and ddp).
func Layout(s shapes.Shape, shardSize int) ([]UnitLayout, error) {
	if shardSize <= 0 {
		return nil, fmt.Errorf("fsdp: shard group size %d must be positive", shardSize)
	}
	units, err := model.Layout(s)
	if err != nil {
		return nil, fmt.Errorf("fsdp: %w", err)
	}
	out := make([]UnitLayout, len(units))
	for i, u := range units {
		padded := (u.Size + shardSize - 1) / shardSize * shardSize
		out[i] = UnitLayout{Name: u.Name, Size: u.Size, Padded: padded, ShardLen: padded / shardSize}
	}
	return out, nil
}

// unit is one wrap unit's state on this rank.
type unit struct {
	size, padded, shardLen int
	// shard, gradShard, m, v: this rank's part (the whole unit when replicated).
	shard, gradShard, m, v device.Buffer
	// full is the gathered flat parameter while it is held; owned is false when it
	// is shard itself (a shard group of one, or a replicated strategy).
	full  device.Buffer
	owned bool
	// shared is full's memory when it lies in the gather communicator's shared
	// arena (sharedGather), given back there when full is freed.
	shared []float32
	// resident is the unit's whole padded flat parameter, kept in the shared
	// arena for the trainer's life under zero-copy gathers (see residentUnits):
	// shard is this rank's piece of it, and full a view of all of it.
	resident []float32
	// pending delivers the result of an all-gather in flight into full, and
	// when it ran on its goroutine.
	pending chan gatherDone
	// accum is the full gradient of a sharded strategy, from the unit's first
	// backward of a step to its reduction on the last micro-step.
	accum device.Buffer
}

// testHooks are nil outside tests: they slow a rank down where zero-copy gathers
// rely on order (residentUnits), so that a missing order shows as wrong losses.
var testHooks struct {
	// beforeRead runs before unit i's forward or backward on world rank r.
	beforeRead func(r, i int)
	// beforeWrite runs before world rank r writes its shards (what: "optimizer",
	// "load").
	beforeWrite func(r int, what string)
}

// hookRead and hookWrite call testHooks.
func (t *Trainer) hookRead(i int) {
	if testHooks.beforeRead != nil {
		testHooks.beforeRead(t.world.Rank(), i)
	}
}

func (t *Trainer) hookWrite(what string) {
	if testHooks.beforeWrite != nil {
		testHooks.beforeWrite(t.world.Rank(), what)
	}
}

// Trainer trains the model on one rank. It is used from one goroutine.
type Trainer struct {
	cfg        Config
	dev        device.Device
	model      *model.Model
	world      comm.Communicator
	shard      comm.Communicator // nil: a group of one
	gather     comm.Communicator // the prefetch stream; nil: a group of one
	replicate  comm.Communicator // nil: a group of one
	owned      []comm.Communicator
	units      []*unit
	replicated bool // no_shard, ddp
	// param is the dtype of the gathered parameters, activations and unsharded
	// gradients: F32, or BF16 under mixed precision.
	param device.DType
	// streams is the stream schedule (streams.go); nil: gathers on goroutines.
	streams *streamSchedule
	// sharedGather and overMemory, when set, put the gathered parameters in
	// memory shared by the ranks of a node (see sharedGathered).
	sharedGather comm.SharedGatherer
	overMemory   allocatorOver
	// sharedGathers counts the all-gathers into shared buffers, and
	// inPlaceGathers the zero-copy ones (residentUnits), which tests check to
	// know which path ran.
	sharedGathers, inPlaceGathers int
	// resident holds the units' resident buffers under zero-copy gathers, in
	// allocation order, for Close to give back.
	resident [][]float32
	// rec records where each step's time goes (timeline.go).
	rec    recorder
	step   int
	broken error
}

// New builds rank world.Rank()'s trainer: it splits the communicators the strategy
// needs (a collective: every rank calls New together), allocates the shards and
// initializes them. Collectives on the units' buffers go through
// comm.OnBuffers: a device-memory communicator (NCCL) takes the buffers
// themselves, the TCP ring their host views, so with it the device's buffers
// must be host float32 (the cpu device in float32 mode).
func New(ctx context.Context, dev device.Device, world comm.Communicator, cfg Config) (*Trainer, error) {
	if dev == nil || world == nil {
		return nil, errors.New("fsdp: New needs a device and a world communicator")
	}
	cfg, err := cfg.withDefaults(world.Size())
	if err != nil {
		return nil, err
	}
	m, err := model.New(dev, cfg.Shape)
	if err != nil {
		return nil, fmt.Errorf("fsdp: %w", err)
	}
	t := &Trainer{cfg: cfg, dev: dev, model: m, world: world}
	if cfg.MixedPrecision == sweeps.BF16 {
		if _, ok := dev.(device.MixedPrecision); !ok {
			return nil, fmt.Errorf("fsdp: mixed_precision bf16: device %s stores float32 only (train with mixed_precision fp32)", dev.Name())
		}
		t.param = device.BF16
	}
	if err := t.groups(ctx); err != nil {
		t.Close()
		return nil, err
	}
	if t.streams, err = newStreamSchedule(t); err != nil {
		t.Close()
		return nil, err
	}
	if sg, ok := t.gather.(comm.SharedGatherer); ok && t.streams == nil {
		if ao, ok := dev.(allocatorOver); ok {
			t.sharedGather, t.overMemory = sg, ao
		}
	}
	if err := t.allocate(ctx); err != nil {
		t.Close()
		return nil, err
	}
	t.newRecorder()
	return t, nil
}

// newRecorder sizes the step recorder's slices for a step's intervals (a few
// per unit and micro-step), so that recording does not allocate once running,
// and times the device's streams when it has timing events.
func (t *Trainer) newRecorder() {
	n := t.cfg.GradAccum*len(t.units)*6 + 16
	t.rec.cur = make([]interval, 0, n)
	t.rec.spans, t.rec.kset, t.rec.cset = make([]span, 0, n), make([]span, 0, n), make([]span, 0, n)
	if t.streams != nil {
		if ts, ok := t.streams.s.(timedStreams); ok {
			t.rec.ev, t.rec.streams = ts, t.streams.s
			t.rec.pairs = make([]timedPair, 0, n)
			t.streams.rec = &t.rec
		}
	}
}

// breakdownSource is StepReport.Breakdown's Source.
func (t *Trainer) breakdownSource() string {
	if t.rec.ev != nil {
		return "cuda-events"
	}
	return "gotrain"
}

// allocatorOver is a device that allocates over memory it is given (the cpu
// device's AllocDTypeOn), charging it as its own.
type allocatorOver interface {
	AllocDTypeOn(mem []float32, t device.DType, cat device.Category) (device.Buffer, error)
}

// sharedGathered allocates unit u's gathered parameters in the shared arena of
// a shared-memory gather communicator, or returns nil when there is none or it is
// full (every rank's arena agrees, so all fall back alike). The ranks of a node
// then hold one physical gathered buffer, and the all-gather only writes each
// rank's piece into it (comm.SharedGatherer): this is sound because a gathered
// buffer is only read between its all-gather and its free, and every rank
// allocates and frees gathered buffers in the same order. The device charges the
// buffer to this rank as any other, so memory accounting does not change.
func (t *Trainer) sharedGathered(u *unit) (device.Buffer, error) {
	if t.sharedGather == nil {
		return nil, nil
	}
	mem, ok := t.sharedGather.AllocShared(u.padded)
	if !ok {
		return nil, nil
	}
	full, err := t.overMemory.AllocDTypeOn(mem, t.param, device.Params)
	if err != nil {
		t.sharedGather.FreeShared(mem)
		return nil, err
	}
	u.shared = mem
	return full, nil
}

// residentUnits returns, under zero-copy gathers, every unit's padded flat
// parameter allocated in the gather communicator's shared arena for the
// trainer's life (in unit order, so at the same offsets on every rank), or nil
// when zero-copy gathers do not apply or do not fit (then on every rank).
//
// Zero-copy gathers apply when the gather communicator shares buffers
// (comm.SharedGatherer: shared memory, all of the shard group on one node), the
// gathered dtype is fp32 (bf16 gathers a cast, which must be written somewhere),
// the strategy shards (full_shard, shard_grad_op, hybrid_shard's node-local
// shard group; no_shard and ddp hold the unit already), no device streams order
// the collectives, and the device can allocate over given memory (the cpu
// device in float32). This rank's shard is then its own piece of the unit's
// resident buffer, and the unit's all-gather is in place: a barrier that moves
// no byte (comm.SharedGatherer.AllGatherShared with a nil fill), after which
// full is a view of the whole buffer. The accounting is the copying path's:
// the shard is charged as Params at its Alloc, full as the gathered Params at
// each gather, released at reshard (the memory stays).
//
// Soundness: rank q writes its piece of unit u only where no rank can still be
// reading u's full view, and no rank reads it before every piece is written.
// Reads of full happen only between the unit's gather and its reshard, inside
// Step (forward, backward, activation-checkpointing's recompute, shard_grad_op's
// hold from forward to backward, prefetched units alike: all read, none writes;
// gradient accumulation writes only u.accum). The writers of a piece are:
//   - AdamW at the end of a step. On rank q it follows q's reduce-scatter of
//     every unit on the last micro-step, which cannot complete before every rank
//     of the shard group entered it, and each rank r enters u's reduce-scatter
//     only after u's backward and reshard, its last read of u in the step (the
//     backward runs the units last to first; prefetch reaches only lower units,
//     and what it gathers is waited for before that unit's own backward).
//   - Initialisation in New, before the rank's first gather.
//   - LoadSharded and LoadFull: after release (every transient freed) and an
//     all-reduce of the world (agree) that every rank enters only from between
//     steps, so no rank is reading; no write happens on a failed check.
//
// The next read of u's pieces on any rank follows its next gather of u, whose
// barrier no rank enters before finishing its own writes (program order), so the
// reader sees every piece written. SaveSharded, SaveFull and Params only read
// this rank's own piece. A trainer broken by an error writes nothing more.
// TestZeroCopyGathers and TestZeroCopyOrdering check these with ranks slowed at
// the points that a missing order would expose.
//
// The decision is a collective (AgreeShared), since one rank's arena can fail
// alone (its pages are reserved in the shared file, which a full tmpfs refuses):
// when any rank has no room, every rank frees what it took (returning every
// allocator to empty, the same on all) and gathers by copying.
func (t *Trainer) residentUnits(ctx context.Context, layout []UnitLayout) ([][]float32, error) {
	if t.sharedGather == nil || t.param != device.F32 || t.replicated || t.shard == nil || t.cfg.copyGathers ||
		t.gather.Rank() != t.shard.Rank() {
		return nil, nil
	}
	var bufs [][]float32
	ok := true
	for _, l := range layout {
		buf, fits := t.sharedGather.AllocShared(l.Padded)
		if !fits {
			ok = false
			break
		}
		bufs = append(bufs, buf)
	}
	agreed, err := t.sharedGather.AgreeShared(ctx, ok, bufs)
	if err != nil || !agreed {
		for _, b := range slices.Backward(bufs) {
			t.sharedGather.FreeShared(b)
		}
		if err != nil {
			return nil, fmt.Errorf("fsdp: rank %d: place the units in shared memory: %w", t.world.Rank(), err)
		}
		return nil, nil
	}
	t.resident = bufs
	return bufs, nil
}

// startInPlaceGather issues unit u's zero-copy all-gather (residentUnits): full
// becomes a view of the unit's resident buffer, charged as the copying path's
// gathered buffer, valid once the barrier is through.
func (t *Trainer) startInPlaceGather(ctx context.Context, u *unit) error {
	full, err := t.overMemory.AllocDTypeOn(u.resident, device.F32, device.Params)
	if err != nil {
		return err
	}
	u.full, u.owned = full, true
	t.inPlaceGathers++
	dst, n := u.resident, u.shardLen
	goGather(u, func() error { return t.sharedGather.AllGatherShared(ctx, dst, n, device.F32, nil) })
	return nil
}

// startSharedGather issues unit i's all-gather into its shared gathered buffer:
// the fp32 shard is copied (under bf16, cast) into this rank's piece inside the
// collective, after every rank is done with what the memory held before.
func (t *Trainer) startSharedGather(ctx context.Context, u *unit) error {
	src, err := comm.HostView(u.shard)
	if err != nil {
		return err
	}
	dst, n, dt := u.shared, u.shardLen, t.param
	t.sharedGathers++
	goGather(u, func() error {
		return t.sharedGather.AllGatherShared(ctx, dst, n, dt, func(piece []float32) {
			if dt == device.BF16 { // the cpu device's Cast, element by element
				for k, v := range src {
					piece[k] = device.RoundBF16(v)
				}
				return
			}
			copy(piece, src)
		})
	})
	return nil
}

// withDefaults validates c for a world of ws ranks and fills in defaults.
func (c Config) withDefaults(ws int) (Config, error) {
	switch c.Sharding {
	case sweeps.FullShard, sweeps.ShardGradOp, sweeps.NoShard, sweeps.DDP:
	case sweeps.HybridShard:
		if c.GPUsPerNode <= 0 || ws%c.GPUsPerNode != 0 {
			return c, fmt.Errorf("fsdp: hybrid_shard needs gpus_per_node that divides the world size %d, got %d", ws, c.GPUsPerNode)
		}
	default:
		return c, fmt.Errorf("fsdp: sharding %q is not one of %v", c.Sharding, sweeps.ShardingValues)
	}
	switch c.BackwardPrefetch {
	case "":
		c.BackwardPrefetch = sweeps.PrefetchNone
	case sweeps.BackwardPre, sweeps.BackwardPost, sweeps.PrefetchNone:
	default:
		return c, fmt.Errorf("fsdp: backward_prefetch %q is not one of %v", c.BackwardPrefetch, sweeps.BackwardPrefetchValues)
	}
	switch c.MixedPrecision {
	case "":
		c.MixedPrecision = sweeps.FP32
	case sweeps.FP32, sweeps.BF16:
	case sweeps.FP16:
		return c, errors.New("fsdp: mixed_precision fp16 needs loss scaling (a ShardedGradScaler), which the Go trainer does not have: use bf16 or fp32")
	default:
		return c, fmt.Errorf("fsdp: mixed_precision %q is not one of %v", c.MixedPrecision, sweeps.MixedPrecisionValues)
	}
	if c.GradAccum == 0 {
		c.GradAccum = 1
	}
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	switch {
	case c.GradAccum < 0 || c.BatchPerDevice <= 0 || c.SeqLen <= 0:
		return c, fmt.Errorf("fsdp: grad_accum %d, batch_per_device %d and seq_len %d must be positive", c.GradAccum, c.BatchPerDevice, c.SeqLen)
	case !(c.LR > 0) || c.WeightDecay < 0 || c.GradClip < 0:
		return c, fmt.Errorf("fsdp: lr %g must be positive, weight_decay %g and grad_clip %g not negative", c.LR, c.WeightDecay, c.GradClip)
	case c.Data != "" && !slices.Contains(model.DataKinds, c.Data):
		return c, fmt.Errorf("fsdp: data %q is none of %v", c.Data, model.DataKinds)
	}
	return c, nil
}

// groups splits the shard, prefetch and replicate communicators.
func (t *Trainer) groups(ctx context.Context) error {
	rank, ws := t.world.Rank(), t.world.Size()
	split := func(parent comm.Communicator, color int, what string) (comm.Communicator, error) {
		c, err := parent.Split(ctx, color, parent.Rank())
		if err != nil {
			return nil, fmt.Errorf("fsdp: rank %d: split the %s group: %w", rank, what, err)
		}
		t.owned = append(t.owned, c)
		if c.Size() == 1 {
			return nil, nil
		}
		return c, nil
	}
	var err error
	switch t.cfg.Sharding {
	case sweeps.FullShard, sweeps.ShardGradOp:
		t.shard = t.world
	case sweeps.NoShard, sweeps.DDP:
		t.replicated, t.replicate = true, t.world
	case sweeps.HybridShard:
		gpn := t.cfg.GPUsPerNode
		if t.shard, err = split(t.world, rank/gpn, "hybrid shard"); err != nil {
			return err
		}
		if t.replicate, err = split(t.world, rank%gpn, "hybrid replicate"); err != nil {
			return err
		}
	}
	if ws == 1 {
		t.shard, t.replicate = nil, nil
	}
	if t.shard != nil {
		if t.gather, err = split(t.shard, 0, "prefetch"); err != nil {
			return err
		}
	}
	return nil
}

// shardSize is the number of ranks a unit is split over.
func (t *Trainer) shardSize() int {
	if t.shard == nil {
		return 1
	}
	return t.shard.Size()
}

// allocate creates and initializes every unit's shard, gradient shard and moments.
func (t *Trainer) allocate(ctx context.Context) error {
	n, rank := t.shardSize(), 0
	if t.shard != nil {
		rank = t.shard.Rank()
	}
	layout, err := Layout(t.cfg.Shape, n)
	if err != nil {
		return err
	}
	resident, err := t.residentUnits(ctx, layout)
	if err != nil {
		return err
	}
	for i, mu := range t.model.Units {
		u := &unit{size: mu.Size, padded: layout[i].Padded, shardLen: layout[i].ShardLen}
		t.units = append(t.units, u)
		for _, b := range []struct {
			dst *device.Buffer
			cat device.Category
		}{{&u.shard, device.Params}, {&u.gradShard, device.Grads}, {&u.m, device.Optimizer}, {&u.v, device.Optimizer}} {
			var buf device.Buffer
			var err error
			if b.dst == &u.shard && resident != nil {
				// Charged as the Alloc below: Params, shardLen float32.
				u.resident = resident[i]
				buf, err = t.overMemory.AllocDTypeOn(u.resident[rank*u.shardLen:(rank+1)*u.shardLen], device.F32, b.cat)
			} else {
				buf, err = t.dev.Alloc(u.shardLen, b.cat)
			}
			if err != nil {
				return fmt.Errorf("fsdp: allocate the %s shard of unit %s (%d elements): %w", b.cat, mu.Name, u.shardLen, err)
			}
			if comm.NeedsHostBuffers(t.world) {
				if _, err := comm.HostView(buf); err != nil {
					t.dev.Free(buf)
					return fmt.Errorf("fsdp: device %s: %w", t.dev.Name(), err)
				}
			}
			*b.dst = buf
		}
		init := make([]float32, u.shardLen)
		if err := mu.Init(t.cfg.Seed, rank*u.shardLen, init); err != nil {
			return fmt.Errorf("fsdp: %w", err)
		}
		t.dev.CopyFromHost(u.shard, init)
		if (t.replicated || n == 1) && t.param == device.F32 {
			u.full = u.shard // under bf16 the unit is cast into a gathered buffer instead
		}
	}
	return nil
}

// GlobalBatch is the samples per optimizer step over every rank.
func (t *Trainer) GlobalBatch() int {
	return t.world.Size() * t.cfg.BatchPerDevice * t.cfg.GradAccum
}

// Model is the model the trainer runs.
func (t *Trainer) Model() *model.Model { return t.model }

// Step runs one optimizer step: GradAccum micro-steps of forward and backward, the
// gradient reduction, clipping and AdamW. After an error the trainer is unusable.
func (t *Trainer) Step(ctx context.Context) (StepReport, error) {
	if t.broken != nil {
		return StepReport{}, fmt.Errorf("fsdp: trainer is unusable after an earlier error: %w", t.broken)
	}
	rep, err := t.runStep(ctx)
	if err != nil {
		t.rec.drop()
		t.broken = err
		t.release()
		return StepReport{}, fmt.Errorf("fsdp: rank %d step %d: %w", t.world.Rank(), t.step+1, err)
	}
	return rep, nil
}

func (t *Trainer) runStep(ctx context.Context) (StepReport, error) {
	t.rec.begin()
	c := t.cfg
	ws, rank := t.world.Size(), t.world.Rank()
	if t.replicated {
		for _, u := range t.units {
			t.dev.Zero(u.gradShard)
		}
	}
	var loss float64
	for k := range c.GradAccum {
		first := t.step*t.GlobalBatch() + k*ws*c.BatchPerDevice + rank*c.BatchPerDevice
		inputs, targets, err := model.BatchOf(c.Data, c.Seed, first, c.BatchPerDevice, c.SeqLen, c.Shape.Vocab)
		if err != nil {
			return StepReport{}, err
		}
		p, err := t.model.NewPass(inputs, targets, c.SeqLen)
		if err != nil {
			return StepReport{}, err
		}
		p.LossScale = 1 / float32(c.GradAccum*len(inputs))
		err = t.microStep(ctx, p, k == c.GradAccum-1)
		p.Free()
		if err != nil {
			return StepReport{}, err
		}
		loss += p.Loss()
	}
	if t.streams != nil {
		if err := t.streams.finish(); err != nil {
			return StepReport{}, err
		}
	}
	norm, err := t.clip(ctx)
	if err != nil {
		return StepReport{}, err
	}
	t.step++
	opt := device.AdamWConfig{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay, Step: t.step}
	t.hookWrite("optimizer")
	_ = t.rec.onStream(device.ComputeStream, opOptimizer, LaneCompute, unitNone, func() error {
		for _, u := range t.units {
			t.dev.AdamW(u.shard, u.gradShard, u.m, u.v, opt)
		}
		return nil
	})
	lossBuf := []float32{float32(loss / float64(c.GradAccum))}
	if ws > 1 {
		err := t.rec.host(opAllReduce, LaneReduce, unitLoss, func() error { return t.world.AllReduce(ctx, lossBuf, comm.Average) })
		if err != nil {
			return StepReport{}, fmt.Errorf("all-reduce the loss: %w", err)
		}
	}
	if err := t.dev.Sync(); err != nil {
		return StepReport{}, err
	}
	dur := t.rec.now()
	if err := t.rec.resolve(); err != nil {
		return StepReport{}, err
	}
	b := t.rec.breakdown(dur, t.breakdownSource())
	t.rec.keepStep(t.step, dur)
	return StepReport{Step: t.step, Loss: float64(lossBuf[0]), GradNorm: norm, Time: dur,
		Tokens: t.GlobalBatch() * c.SeqLen, Breakdown: b}, nil
}

// microStep runs one micro-batch forward and backward; on the last micro-step of a
// step it reduces each unit's gradient right after the unit's backward.
func (t *Trainer) microStep(ctx context.Context, p *model.Pass, last bool) error {
	n := len(t.units)
	fullShard := t.cfg.Sharding == sweeps.FullShard || t.cfg.Sharding == sweeps.HybridShard
	for i := range n {
		if err := t.gathered(ctx, i); err != nil {
			return err
		}
		if t.cfg.ForwardPrefetch && i+1 < n {
			if err := t.startGather(ctx, i+1); err != nil {
				return err
			}
		}
		save := !t.cfg.ActivationCheckpointing || i == 0 || i == n-1
		t.hookRead(i)
		err := t.rec.onStream(device.ComputeStream, opForward, LaneCompute, i, func() error {
			return p.Forward(i, t.units[i].full, save)
		})
		if err != nil {
			return err
		}
		if fullShard {
			t.reshard(i)
		}
	}
	for i := n - 1; i >= 0; i-- {
		u := t.units[i]
		if err := t.gathered(ctx, i); err != nil {
			return err
		}
		prefetch := fullShard && i > 0
		if prefetch && t.cfg.BackwardPrefetch == sweeps.BackwardPre {
			if err := t.startGather(ctx, i-1); err != nil {
				return err
			}
		}
		t.hookRead(i)
		if t.param != device.F32 {
			err := t.rec.onStream(device.ComputeStream, opBackward, LaneCompute, i, func() error {
				return t.backwardMixed(ctx, p, i)
			})
			if err != nil {
				return err
			}
			if prefetch && t.cfg.BackwardPrefetch == sweeps.BackwardPost {
				if err := t.startGather(ctx, i-1); err != nil {
					return err
				}
			}
			if last {
				if err := t.reduce(ctx, i); err != nil {
					return err
				}
			}
			continue
		}
		grads := u.gradShard
		if !t.replicated {
			if u.accum == nil {
				b, err := t.dev.Alloc(u.padded, device.Grads)
				if err != nil {
					return fmt.Errorf("allocate the full gradient of unit %s: %w", t.model.Units[i].Name, err)
				}
				u.accum = b
			}
			grads = u.accum
		}
		err := t.rec.onStream(device.ComputeStream, opBackward, LaneCompute, i, func() error {
			return p.Backward(i, u.full, grads)
		})
		if err != nil {
			return err
		}
		t.reshard(i)
		if prefetch && t.cfg.BackwardPrefetch == sweeps.BackwardPost {
			if err := t.startGather(ctx, i-1); err != nil {
				return err
			}
		}
		if last {
			if err := t.reduce(ctx, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// startGather issues unit i's all-gather on its own goroutine, unless its full
// parameters are already held or on their way.
func (t *Trainer) startGather(ctx context.Context, i int) error {
	u := t.units[i]
	if u.full != nil || u.pending != nil {
		return nil
	}
	// Allocation stays on this goroutine: the device's accounting is not shared.
	if u.resident != nil {
		if err := t.startInPlaceGather(ctx, u); err != nil {
			return fmt.Errorf("allocate the gathered parameters of unit %s: %w", t.model.Units[i].Name, err)
		}
		return nil
	}
	full, err := t.sharedGathered(u)
	if err == nil && full != nil {
		u.full, u.owned = full, true
		return t.startSharedGather(ctx, u)
	}
	if err == nil {
		full, err = device.AllocDType(t.dev, u.padded, t.param, device.Params)
	}
	if err != nil {
		return fmt.Errorf("allocate the gathered parameters of unit %s: %w", t.model.Units[i].Name, err)
	}
	u.full, u.owned = full, true
	shard := u.shard
	if t.param != device.F32 {
		// FSDP2's all-gather copy-in: the fp32 shard is cast into this rank's own
		// slot of the gathered buffer, which the all-gather then sends in place.
		rank := 0
		if t.gather != nil {
			rank = t.gather.Rank()
		}
		shard = full.Slice(rank*u.shardLen, u.shardLen)
		t.dev.(device.MixedPrecision).Cast(shard, u.shard)
		if t.gather == nil { // a group of one: the cast is the gather
			return nil
		}
	}
	if t.streams != nil {
		if err := t.streams.startGather(ctx, i, full, shard); err != nil {
			return fmt.Errorf("all-gather unit %s: %w", t.model.Units[i].Name, err)
		}
		return nil
	}
	g := comm.OnBuffers(t.gather)
	goGather(u, func() error { return g.AllGatherBuffers(ctx, full, shard) })
	return nil
}

// gatherDone is how an all-gather on its goroutine ended, and when it ran.
type gatherDone struct {
	err        error
	start, end time.Time
}

// goGather runs unit u's all-gather f on a goroutine of its own, delivering
// its result and its times on u.pending.
func goGather(u *unit, f func() error) {
	done := make(chan gatherDone, 1)
	u.pending = done
	go func() {
		start := time.Now()
		err := f()
		done <- gatherDone{err: err, start: start, end: time.Now()}
	}()
}

// backwardMixed runs unit i's backward under bf16: into a fresh bf16 gradient
// of the whole (padded) unit, which is then added into the fp32 buffer that is
// reduced: the gradient shard itself for replicated strategies, else the unit's
// fp32 full gradient (u.accum), kept across micro-steps until the last reduces it.
func (t *Trainer) backwardMixed(ctx context.Context, p *model.Pass, i int) error {
	u, name := t.units[i], t.model.Units[i].Name
	g16, err := device.AllocDType(t.dev, u.padded, t.param, device.Grads)
	if err != nil {
		return fmt.Errorf("allocate the %v gradient of unit %s: %w", t.param, name, err)
	}
	defer t.dev.Free(g16)
	if err := p.Backward(i, u.full, g16); err != nil {
		return err
	}
	t.reshard(i)
	acc := u.gradShard
	if !t.replicated {
		if u.accum == nil {
			if u.accum, err = t.dev.Alloc(u.padded, device.Grads); err != nil {
				return fmt.Errorf("allocate the fp32 gradient of unit %s for its reduction: %w", name, err)
			}
		}
		acc = u.accum
	}
	t.dev.Add(acc, g16, 1)
	return nil
}

// gathered makes sure unit i's full parameters are held: it waits for a prefetch
// in flight or gathers now.
func (t *Trainer) gathered(ctx context.Context, i int) error {
	if err := t.startGather(ctx, i); err != nil {
		return err
	}
	u := t.units[i]
	if t.streams != nil {
		t.streams.use(i)
	}
	if u.pending == nil {
		return nil
	}
	waited := t.rec.now()
	d := <-u.pending
	t.rec.add(opAllGather, LaneCompute, i, true, waited, t.rec.now())
	t.rec.add(opAllGather, LaneGather, i, false, t.rec.since(d.start), t.rec.since(d.end))
	u.pending = nil
	if err := d.err; err != nil {
		return fmt.Errorf("all-gather unit %s: %w", t.model.Units[i].Name, err)
	}
	return nil
}

// reshard frees unit i's gathered parameters.
func (t *Trainer) reshard(i int) {
	u := t.units[i]
	if u.owned {
		t.dev.Free(u.full)
		u.full, u.owned = nil, false
	}
	if u.shared != nil {
		t.sharedGather.FreeShared(u.shared)
		u.shared = nil
	}
}

// reduce averages unit i's gradient over every rank into its gradient shard.
func (t *Trainer) reduce(ctx context.Context, i int) error {
	if t.streams != nil {
		return t.streams.reduce(ctx, t, i)
	}
	u, name := t.units[i], t.model.Units[i].Name
	if u.accum != nil {
		if t.shard != nil {
			err := t.rec.host(opReduceScatter, LaneReduce, i, func() error {
				return comm.OnBuffers(t.shard).ReduceScatterBuffers(ctx, u.gradShard, u.accum, comm.Average)
			})
			if err != nil {
				return fmt.Errorf("reduce-scatter the gradient of unit %s: %w", name, err)
			}
		} else {
			t.dev.Copy(u.gradShard, u.accum)
		}
		t.dev.Free(u.accum)
		u.accum = nil
	}
	if t.replicate != nil {
		err := t.rec.host(opAllReduce, LaneReduce, i, func() error {
			return comm.OnBuffers(t.replicate).AllReduceBuffers(ctx, u.gradShard, comm.Average)
		})
		if err != nil {
			return fmt.Errorf("all-reduce the gradient of unit %s: %w", name, err)
		}
	}
	return nil
}

// clip scales the gradient shards to a global norm of at most GradClip and returns
// the norm before clipping; replicas hold the same shards, so the squares are
// summed over the shard group only.
func (t *Trainer) clip(ctx context.Context) (float64, error) {
	if t.cfg.GradClip <= 0 {
		return 0, nil
	}
	var ss float64
	_ = t.rec.onStream(device.ComputeStream, opClip, LaneCompute, unitNone, func() error {
		for _, u := range t.units {
			ss += t.dev.SumSquares(u.gradShard)
		}
		return nil
	})
	if t.shard != nil {
		buf := []float32{float32(ss)}
		err := t.rec.host(opAllReduce, LaneReduce, unitNorm, func() error { return t.shard.AllReduce(ctx, buf, comm.Sum) })
		if err != nil {
			return 0, fmt.Errorf("all-reduce the gradient norm: %w", err)
		}
		ss = float64(buf[0])
	}
	norm := math.Sqrt(ss)
	if norm > t.cfg.GradClip {
		// torch.nn.utils.clip_grad_norm_'s coefficient, eps included.
		coef := float32(t.cfg.GradClip / (norm + 1e-6))
		_ = t.rec.onStream(device.ComputeStream, opClip, LaneCompute, unitNone, func() error {
			for _, u := range t.units {
				t.dev.Scale(u.gradShard, coef)
			}
			return nil
		})
	}
	return norm, nil
}

// release waits for gathers in flight and frees every transient buffer, so a
// failed step leaves only the shards allocated.
func (t *Trainer) release() {
	if t.streams != nil {
		_ = t.streams.finish() // the step's error is reported already
	}
	for i, u := range t.units {
		if u.pending != nil {
			<-u.pending
			u.pending = nil
		}
		t.reshard(i)
		if u.accum != nil {
			t.dev.Free(u.accum)
			u.accum = nil
		}
	}
}

// Report is this rank's memory and communication so far.
func (t *Trainer) Report() RankReport {
	r := RankReport{Rank: t.world.Rank(), Memory: t.dev.Memory(), Comm: t.world.Stats(), Gathers: GathersNone}
	for _, c := range t.owned {
		r.Comm = r.Comm.Add(c.Stats())
	}
	switch {
	case t.replicated || t.shard == nil || t.step == 0:
	case t.inPlaceGathers > 0:
		r.Gathers = GathersZeroCopy
	case t.sharedGathers > 0:
		r.Gathers = GathersShared
	default:
		r.Gathers = GathersCopy
	}
	return r
}

// Params copies unit i's shard of the parameters (padding included) to the host.
func (t *Trainer) Params(i int) []float32 {
	out := make([]float32, t.units[i].shardLen)
	t.dev.CopyToHost(out, t.units[i].shard)
	return out
}

// Close frees every buffer and closes the communicators the trainer split (not the
// world communicator, which the caller owns).
func (t *Trainer) Close() error {
	t.release()
	for _, u := range t.units {
		for _, b := range []device.Buffer{u.shard, u.gradShard, u.m, u.v} {
			if b != nil {
				t.dev.Free(b)
			}
		}
	}
	t.units = nil
	// The shards over resident buffers are freed above (accounting only); the
	// memory goes back before its communicator unmaps it.
	for _, b := range slices.Backward(t.resident) {
		t.sharedGather.FreeShared(b)
	}
	t.resident = nil
	var errs []error
	for _, c := range t.owned {
		errs = append(errs, c.Close())
	}
	t.owned = nil
	return errors.Join(errs...)
}

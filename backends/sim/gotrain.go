package sim

import (
	"maps"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TrainerGotrain in Assumptions.Trainer says the run is the Go trainer's
// (backends/gotrain), whose allocations are deterministic: its peak is found by
// replaying the trainer's allocation schedule (gotrainPeak) instead of summing
// per-category formulas. The formulas take every category at its own worst, but
// in gotrain they peak at different moments (the logits are freed before the
// first block's backward; a full_shard unit's gathered parameters and its
// unsharded gradient are held together only during that unit's backward), so
// their sum over-predicted by up to 25% at small scale.
const TrainerGotrain = "gotrain"

// gotrainWalk is the device's byte accounting during a replay: what is held now
// by category, and what was held at the moment the total was highest.
type gotrainWalk struct {
	cur, atPeak map[string]int64
	total, peak int64
	live        map[int]gotrainAlloc
	next        int
	act, stat   int64 // activation dtype bytes, fp32 statistics bytes
}

type gotrainAlloc struct {
	cat   string
	bytes int64
}

func (w *gotrainWalk) alloc(cat string, bytes int64) int {
	w.next++
	w.live[w.next] = gotrainAlloc{cat, bytes}
	w.cur[cat] += bytes
	w.total += bytes
	if w.total > w.peak {
		w.peak = w.total
		w.atPeak = maps.Clone(w.cur)
	}
	return w.next
}

func (w *gotrainWalk) free(hs ...int) {
	for _, h := range hs {
		a, ok := w.live[h]
		if !ok {
			continue
		}
		delete(w.live, h)
		w.cur[a.cat] -= a.bytes
		w.total -= a.bytes
	}
}

// gotrainUnits are the Go trainer's wrap units (backends/gotrain/model/layout.go):
// the embedding, each block (q, k, v, o, gate, up, down, two RMSNorms) and the
// head (final norm and the untied output matrix), in elements.
func gotrainUnits(s shapes.Shape) []int64 {
	h, kv, in, v := int64(s.Hidden), int64(s.KVDim()), int64(s.Intermediate), int64(s.Vocab)
	qd := int64(s.Heads * s.HeadDim())
	block := h*qd + 2*h*kv + qd*h + 3*h*in + 2*h
	units := []int64{v * h}
	for range s.Layers {
		units = append(units, block)
	}
	return append(units, h+v*h)
}

// gotrainApplies says whether the replay describes the run: the Go trainer
// trains bias-free, untied Llama shapes only and has no CPU offload; for anything
// else the formulas predict.
func gotrainApplies(p point) bool {
	s := p.shape
	return p.as.Trainer == TrainerGotrain && s.Arch == shapes.ArchLlama && !s.TiedEmbeddings &&
		!s.QKVBias && !s.OutBias && !s.MLPBias && !p.rc.CPUOffload
}

// gotrainPeak replays one optimizer step of backends/gotrain/fsdp (Trainer.runStep,
// microStep, startGather, backwardMixed, reduce) and backends/gotrain/model
// (Pass.Forward, Backward and the block and head functions), allocation by
// allocation, and returns what each category held at the step's peak total. The
// categories are the sim's: the rank's fp32 shards are params, grads and
// optimizer (AdamW's m and v); gathered unit parameters are buffers; unsharded
// gradients (the fp32 buffer a sharded strategy reduces from, kept across
// micro-steps as no_sync does, and bf16's per-unit gradient) are grads; the
// logits are logits and every other activation activations. It is exact for the
// cpu device, whose accounting is per allocation; on cuda, frees ordered by
// events can happen later than here.
func gotrainPeak(p point) map[string]int64 {
	r, s := p.rc, p.shape
	units := gotrainUnits(s)
	n := len(units)
	group := int64(1)
	replicated := false
	switch r.Sharding {
	case sweeps.FullShard, sweeps.ShardGradOp:
		group = int64(r.WorldSize)
	case sweeps.HybridShard:
		group = int64(r.GPUsPerNode)
	default:
		replicated = true
	}
	fullShard := r.Sharding == sweeps.FullShard || r.Sharding == sweeps.HybridShard
	bf16 := r.MixedPrecision != sweeps.FP32
	w := &gotrainWalk{cur: map[string]int64{}, atPeak: map[string]int64{}, live: map[int]gotrainAlloc{},
		act: 4, stat: 4}
	if bf16 {
		w.act = 2 // the trainer computes in its gathered parameters' dtype
	}

	// Trainer.allocate: each unit's padded flat parameter split evenly; shard,
	// gradient shard, m and v are fp32.
	padded := make([]int64, n)
	for i, size := range units {
		padded[i] = (size + group - 1) / group * group
		shard := padded[i] / group * 4
		w.alloc(MemParams, shard)
		w.alloc(MemGrads, shard)
		w.alloc(MemOptimizer, 2*shard)
	}
	// In fp32 a replicated unit, or one sharded over a group of one, computes on
	// its shard itself; otherwise (and always in bf16) it is gathered into a
	// buffer of the compute dtype.
	gathers := bf16 || !(replicated || group == 1)
	full := make([]int, n)  // gathered buffer handle, 0: none held
	accum := make([]int, n) // unsharded fp32 gradient handle
	gather := func(i int) {
		if gathers && full[i] == 0 {
			full[i] = w.alloc(MemBuffers, padded[i]*w.act)
		}
	}
	reshard := func(i int) {
		w.free(full[i])
		full[i] = 0
	}
	reduce := func(i int) {
		w.free(accum[i])
		accum[i] = 0
	}

	// Micro-steps after the second allocate exactly as the second does (the
	// unsharded gradients are held from the first on), so three stand for any
	// number: the first, one between, the last.
	for k := range min(r.GradAccum, 3) {
		last := k == min(r.GradAccum, 3)-1
		ps := newGotrainPass(w, s, int64(r.BatchPerDevice)*int64(r.SeqLen))
		for i := range n {
			gather(i)
			if r.ForwardPrefetch && i+1 < n {
				gather(i + 1)
			}
			ps.forward(i, !r.ActivationCheckpointing || i == 0 || i == n-1)
			if fullShard {
				reshard(i)
			}
		}
		for i := n - 1; i >= 0; i-- {
			gather(i)
			prefetch := fullShard && i > 0
			if prefetch && r.BackwardPrefetch == sweeps.BackwardPre {
				gather(i - 1)
			}
			if bf16 {
				// backwardMixed: a bf16 gradient of the whole unit, added into the
				// fp32 unsharded gradient allocated after it, freed on return.
				g16 := w.alloc(MemGrads, padded[i]*2)
				ps.backward(i)
				reshard(i)
				if !replicated && accum[i] == 0 {
					accum[i] = w.alloc(MemGrads, padded[i]*4)
				}
				w.free(g16)
			} else {
				if !replicated && accum[i] == 0 {
					accum[i] = w.alloc(MemGrads, padded[i]*4)
				}
				ps.backward(i)
				reshard(i)
			}
			if prefetch && r.BackwardPrefetch == sweeps.BackwardPost {
				gather(i - 1)
			}
			if last {
				reduce(i)
			}
		}
	}
	return w.atPeak
}

// gotrainPass replays model.Pass for one micro-batch of rows tokens.
type gotrainPass struct {
	w                   *gotrainWalk
	rows, c, qd, kv, in int64
	heads, vocab        int64
	layers              int
	hidden              []int         // output of unit u, u ≤ layers
	blocks              map[int][]int // saved activations of block u−1
	head                []int         // xn, rstd, logits
	dh                  int
}

func newGotrainPass(w *gotrainWalk, s shapes.Shape, rows int64) *gotrainPass {
	return &gotrainPass{w: w, rows: rows, c: int64(s.Hidden), qd: int64(s.Heads * s.HeadDim()), kv: int64(s.KVDim()),
		in: int64(s.Intermediate), heads: int64(s.Heads), vocab: int64(s.Vocab), layers: s.Layers,
		hidden: make([]int, s.Layers+1), blocks: map[int][]int{}}
}

// a allocates n activation elements of the compute dtype; st n fp32 statistics.
func (p *gotrainPass) a(n int64) int  { return p.w.alloc(MemActivations, n*p.rows*p.w.act) }
func (p *gotrainPass) st(n int64) int { return p.w.alloc(MemActivations, n*p.rows*p.w.stat) }

// Block activation slots, in blockActs' order.
const (
	bXN1 = iota
	bRstd1
	bQ
	bK
	bV
	bAtt
	bLSE
	bMid
	bXN2
	bRstd2
	bGate
	bUp
	bAct
	bSlots
)

func (p *gotrainPass) forward(u int, save bool) {
	switch {
	case u == 0:
		p.hidden[0] = p.a(p.c)
	case u == p.layers+1:
		p.head = p.headForward(save)
	default:
		mode := gtSave
		if !save {
			mode = gtKeepNone
		}
		var acts []int
		p.hidden[u], acts = p.blockForward(mode)
		if save {
			p.blocks[u] = acts
		}
	}
}

type gtMode int

const (
	gtSave gtMode = iota
	gtKeepNone
	gtRecompute
)

// blockForward is model.blockForward's allocations and frees.
func (p *gotrainPass) blockForward(mode gtMode) (out int, a []int) {
	a = make([]int, bSlots)
	drop := func(slots ...int) {
		if mode == gtKeepNone {
			for _, s := range slots {
				p.w.free(a[s])
			}
		}
	}
	a[bXN1], a[bRstd1] = p.a(p.c), p.st(1)
	a[bQ], a[bK], a[bV] = p.a(p.qd), p.a(p.kv), p.a(p.kv)
	drop(bXN1, bRstd1)
	a[bAtt], a[bLSE] = p.a(p.qd), p.st(p.heads)
	drop(bQ, bK, bV, bLSE)
	a[bMid] = p.a(p.c)
	drop(bAtt)
	a[bXN2], a[bRstd2] = p.a(p.c), p.st(1)
	a[bGate], a[bUp] = p.a(p.in), p.a(p.in)
	drop(bXN2, bRstd2)
	a[bAct] = p.a(p.in)
	drop(bGate, bUp)
	if mode == gtRecompute {
		return 0, a
	}
	out = p.a(p.c)
	drop(bMid, bAct)
	return out, a
}

// headForward is model.headForward's: the loss's per-token buffer lives only
// inside the call.
func (p *gotrainPass) headForward(save bool) []int {
	h := []int{p.a(p.c), p.st(1), p.w.alloc(MemLogits, p.rows*p.vocab*p.w.act)}
	p.w.free(p.st(1))
	if !save {
		p.w.free(h...)
		return nil
	}
	return h
}

func (p *gotrainPass) backward(u int) {
	free := p.w.free
	switch {
	case u == p.layers+1:
		// headBackward: the logits' gradient is written over the logits.
		h := p.head
		if h == nil {
			h = p.headForward(true)
		}
		dxn := p.a(p.c)
		free(h[2])
		p.dh = p.a(p.c)
		free(dxn, h[0], h[1])
	case u == 0:
		free(p.dh)
	default:
		a := p.blocks[u]
		if a == nil {
			_, a = p.blockForward(gtRecompute)
		}
		delete(p.blocks, u)
		// blockBackward.
		dact := p.a(p.in)
		free(a[bAct])
		dgate, dup := p.a(p.in), p.a(p.in)
		free(dact, a[bGate], a[bUp])
		dxn2 := p.a(p.c)
		free(dgate, dup, a[bXN2])
		free(dxn2, a[bMid], a[bRstd2])
		datt := p.a(p.qd)
		dq, dk, dv := p.a(p.qd), p.a(p.kv), p.a(p.kv)
		free(datt, a[bAtt], a[bLSE], a[bQ], a[bK], a[bV])
		dxn1 := p.a(p.c)
		free(dq, dk, dv, a[bXN1])
		free(dxn1, a[bRstd1])
	}
	if u > 0 {
		free(p.hidden[u-1])
		p.hidden[u-1] = 0
	}
}

// gotrainHostSchedule says whether p is the Go trainer on a host (cpu)
// profile, whose schedule differs from PyTorch's (backends/gotrain/fsdp:
// microStep, startGather, reduce): with no communication stream, its reduce-
// scatters and all-reduces run on the training goroutine and block it, an
// all-gather nobody prefetched is issued when its unit needs it and waited for
// at once, and only a prefetched all-gather (forward_prefetch, backward_pre)
// runs on a goroutine of its own under the current unit's compute;
// backward_post issues the next unit's all-gather after this unit's backward,
// where only the blocking reduce-scatter follows it, so it hides behind no
// compute. On cuda the trainer orders its collectives on a communication stream
// as PyTorch does, and the model's schedule applies.
func gotrainHostSchedule(p point) bool {
	return p.as.Trainer == TrainerGotrain && !p.hw.IsGPU
}

// gotrainHostOverlap is the share of each kind of collective the Go trainer's
// host schedule (gotrainHostSchedule) hides behind compute: backward
// all-gathers only under backward_pre, forward ones only under
// forward_prefetch, reductions never.
func gotrainHostOverlap(r sweeps.RunConfig) (gather, reduce, forward float64) {
	if r.BackwardPrefetch == sweeps.BackwardPre {
		gather = 1
	}
	if r.ForwardPrefetch {
		forward = 1
	}
	return gather, 0, forward
}

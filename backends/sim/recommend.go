package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Request asks which configuration trains Model fastest on Nodes × GPUsPerNode
// devices of Hardware at GlobalBatch samples of SeqLen tokens per step, using at
// most BudgetBytes of each device.
type Request struct {
	Model, Hardware     string
	Nodes, GPUsPerNode  int
	SeqLen, GlobalBatch int
	// BudgetBytes bounds the predicted peak per device (what nvidia-smi shows);
	// 0 = the device's capacity.
	BudgetBytes int64
	// MixedPrecision is the compute precision (default bf16).
	MixedPrecision string
	// BackendOptions are the sim's options for every point (bandwidths, ...).
	BackendOptions map[string]any
	// Backend is the backend the points are for (default sim): the model
	// predicts a trainer's runs under what that trainer does.
	Backend string
	// Calibration, when not nil, calibrates every prediction.
	Calibration *Calibration
	// Accept, when not nil, is asked of every point before it is predicted: the
	// measuring backend's Validate, so that a backend's refusals lose as such.
	Accept func(sweeps.RunConfig) error
}

// Candidate is one point of the search with its prediction and verdict.
type Candidate struct {
	Config sweeps.RunConfig
	// Pred is nil when the point was refused before predicting.
	Pred *Prediction
	// Rank is the 1-based place among the points within budget; 0 for the others.
	Rank int
	// Lost says why the point is not the first: refused, over budget, does not
	// fit, or slower than the first and what costs it the difference.
	Lost string
}

// Reasons a candidate lost, as Candidate.Lost begins.
const (
	LostRefused    = "refused"
	LostOverBudget = "over budget"
	LostNoFit      = "does not fit"
	LostSlower     = "slower"
	LostTie        = "tie with #1"
)

// TieTolerance is how close two throughputs are to be a tie: the analytic
// model's resolution (whySlower's "as fast"), well inside its error against
// measurements. Among ties the advice that is safer and simpler wins.
const TieTolerance = 0.01

// ThinHeadroom is the fraction of the memory limit (the budget, else the
// device) above which a point has too little headroom to win a tie: allocator
// fragmentation and a longer batch push it over.
const ThinHeadroom = 0.9

// TieRule says how ties are ranked, for people reading a recommendation.
var TieRule = fmt.Sprintf("within %.0f%% of each other's tokens/s, closer than the model can tell, so they are ranked by headroom (above %.0f%% of the memory limit last), then fewer settings changed, then less memory",
	100*TieTolerance, 100*ThinHeadroom)

// MaxCandidates bounds the search: a request whose space is larger is refused
// (its global batch has too many divisors).
const MaxCandidates = 200_000

// Recommend enumerates sharding × micro-batch × grad_accum × activation
// checkpointing × backward and forward prefetch × CPU offload for req (hybrid
// shard groups are one node, as the model's hybrid_shard is), predicts each
// point and ranks those within budget by tokens/s; points within TieTolerance of
// each other are ties, ranked by headroom, plainness and memory (TieRule). Every
// candidate is returned, ranked ones first.
func Recommend(req Request) ([]Candidate, error) {
	if req.Nodes < 1 || req.GPUsPerNode < 1 {
		return nil, fmt.Errorf("nodes (%d) and GPUs per node (%d) must be at least 1", req.Nodes, req.GPUsPerNode)
	}
	if req.Nodes > sweeps.MaxNodes || req.GPUsPerNode > sweeps.MaxGPUsPerNode {
		return nil, fmt.Errorf("nodes %d or GPUs per node %d out of range (at most %d and %d)", req.Nodes, req.GPUsPerNode, sweeps.MaxNodes, sweeps.MaxGPUsPerNode)
	}
	ws := req.Nodes * req.GPUsPerNode
	if req.GlobalBatch < ws || req.GlobalBatch > sweeps.MaxGlobalBatch || req.GlobalBatch%ws != 0 {
		return nil, fmt.Errorf("global batch %d: give a multiple of the %d GPUs, at most %d, so every GPU gets whole samples", req.GlobalBatch, ws, sweeps.MaxGlobalBatch)
	}
	if req.SeqLen < 1 || req.SeqLen > sweeps.MaxSeqLen {
		return nil, fmt.Errorf("seq_len %d out of range (1 to %d)", req.SeqLen, sweeps.MaxSeqLen)
	}
	if req.BudgetBytes < 0 {
		return nil, errors.New("a memory budget must be positive")
	}
	prec := cmp.Or(req.MixedPrecision, sweeps.BF16)
	perGPU := req.GlobalBatch / ws
	var batches []int
	for b := 1; b <= min(perGPU, sweeps.MaxBatchPerDevice); b++ {
		if perGPU%b == 0 && perGPU/b <= sweeps.MaxGradAccum {
			batches = append(batches, b)
		}
	}
	if len(batches) == 0 {
		return nil, fmt.Errorf("global batch %d on %d GPUs needs more than %d micro-steps at every micro-batch the spec allows", req.GlobalBatch, ws, sweeps.MaxGradAccum)
	}
	strategies := []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.NoShard, sweeps.DDP}
	if req.Nodes > 1 && req.GPUsPerNode > 1 {
		strategies = append(strategies, sweeps.HybridShard)
	}
	var cands []Candidate
	for _, sh := range strategies {
		sharded := sh != sweeps.NoShard && sh != sweeps.DDP
		bwd, fwd, off := []string{sweeps.BackwardPre}, []bool{false}, []bool{false}
		if sharded {
			// DDP and no_shard have nothing to prefetch or offload.
			bwd = []string{sweeps.BackwardPre, sweeps.BackwardPost, sweeps.PrefetchNone}
			fwd, off = []bool{false, true}, []bool{false, true}
		}
		for _, b := range batches {
			for _, ac := range []bool{false, true} {
				for _, bp := range bwd {
					for _, fp := range fwd {
						for _, o := range off {
							if len(cands) >= MaxCandidates {
								return nil, fmt.Errorf("more than %d points to predict: give a smaller global batch", MaxCandidates)
							}
							rc := sweeps.RunConfig{Backend: cmp.Or(req.Backend, Name), Hardware: req.Hardware, Model: req.Model, SeqLen: req.SeqLen,
								Nodes: req.Nodes, GPUsPerNode: req.GPUsPerNode, WorldSize: ws, BatchPerDevice: b,
								GradAccum: perGPU / b, GlobalBatch: req.GlobalBatch, Sharding: sh, ActivationCheckpointing: ac,
								BackwardPrefetch: bp, ForwardPrefetch: fp, CPUOffload: o, MixedPrecision: prec,
								WrapPolicy: WrapTransformer}
							rc.AssignID()
							cands = append(cands, judge(req, rc))
						}
					}
				}
			}
		}
	}
	rank(cands, req.BudgetBytes)
	return cands, nil
}

// judge predicts one point and says whether it is within budget.
func judge(req Request, rc sweeps.RunConfig) Candidate {
	c := Candidate{Config: rc}
	if req.Accept != nil {
		if err := req.Accept(rc); err != nil {
			c.Lost = LostRefused + ": " + err.Error()
			return c
		}
	}
	pred, err := PredictCalibrated(rc, req.BackendOptions, req.Calibration)
	if err != nil {
		c.Lost = LostRefused + ": " + err.Error()
		return c
	}
	c.Pred = &pred
	switch {
	case !pred.Feasible:
		c.Lost = LostNoFit + ": " + pred.Reason
	case req.BudgetBytes > 0 && pred.PeakDeviceMemBytes > req.BudgetBytes:
		c.Lost = fmt.Sprintf("%s: predicted %.1f GiB > %.1f GiB", LostOverBudget, gibs(pred.PeakDeviceMemBytes), gibs(req.BudgetBytes))
	}
	return c
}

// plainness counts the non-default choices of a point: between equally fast
// points, the one with fewer knobs turned is the better advice.
func plainness(rc sweeps.RunConfig) int {
	n := 0
	for _, on := range []bool{rc.ActivationCheckpointing, rc.ForwardPrefetch, rc.CPUOffload, rc.BackwardPrefetch != sweeps.BackwardPre, rc.GradAccum > 1} {
		if on {
			n++
		}
	}
	return n
}

// rank orders the candidates within budget by throughput and says of every
// other one why it lost. Throughputs within TieTolerance are ties: a band starts
// at the fastest point left and holds every point within TieTolerance of it;
// inside a band, a point with thin headroom (ThinHeadroom of the budget, else of
// the device) goes last, then more settings changed, then more memory.
func rank(cands []Candidate, budget int64) {
	slices.SortStableFunc(cands, func(a, b Candidate) int {
		if (a.Lost == "") != (b.Lost == "") {
			if a.Lost == "" {
				return -1
			}
			return 1
		}
		if a.Pred == nil || b.Pred == nil {
			return cmp.Compare(btoi(a.Pred == nil), btoi(b.Pred == nil))
		}
		return cmp.Or(cmp.Compare(b.Pred.TokensPerS, a.Pred.TokensPerS),
			cmp.Compare(a.Pred.PeakDeviceMemBytes, b.Pred.PeakDeviceMemBytes),
			cmp.Compare(plainness(a.Config), plainness(b.Config)))
	})
	n := 0
	for n < len(cands) && cands[n].Lost == "" {
		n++
	}
	thin := func(c Candidate) int {
		limit := budget
		if limit <= 0 {
			limit = c.Pred.DeviceMemBytes
		}
		return btoi(limit > 0 && float64(c.Pred.PeakDeviceMemBytes) > ThinHeadroom*float64(limit))
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && cands[j].Pred.TokensPerS >= (1-TieTolerance)*cands[i].Pred.TokensPerS {
			j++
		}
		slices.SortStableFunc(cands[i:j], func(a, b Candidate) int {
			return cmp.Or(cmp.Compare(thin(a), thin(b)), cmp.Compare(plainness(a.Config), plainness(b.Config)),
				cmp.Compare(a.Pred.PeakDeviceMemBytes, b.Pred.PeakDeviceMemBytes), cmp.Compare(b.Pred.TokensPerS, a.Pred.TokensPerS))
		})
		if i == 0 {
			for k := 1; k < j; k++ {
				d := cands[k].Pred.TokensPerS/cands[0].Pred.TokensPerS - 1
				cands[k].Lost = fmt.Sprintf("%s: %+.1f%% tokens/s, %s", LostTie, 100*d, tieWhy(cands[k], cands[0], thin))
			}
		}
		i = j
	}
	for i := range cands[:n] {
		c := &cands[i]
		c.Rank = i + 1
		if i > 0 && c.Lost == "" {
			c.Lost = LostSlower + " " + whySlower(c.Pred, cands[0].Pred)
		}
	}
}

// tieWhy says why c ranks below best, a tie: what best has that c does not.
func tieWhy(c, best Candidate, thin func(Candidate) int) string {
	switch {
	case thin(c) > thin(best):
		return fmt.Sprintf("but %.1f GiB is above %.0f%% of the memory limit: #1 leaves headroom", gibs(c.Pred.PeakDeviceMemBytes), 100*ThinHeadroom)
	case plainness(c.Config) > plainness(best.Config):
		return "within the model's resolution: #1 changes fewer settings"
	case c.Pred.PeakDeviceMemBytes > best.Pred.PeakDeviceMemBytes:
		return fmt.Sprintf("within the model's resolution: #1 takes %.1f GiB less", gibs(c.Pred.PeakDeviceMemBytes-best.Pred.PeakDeviceMemBytes))
	}
	return "within the model's resolution"
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// whySlower names the cost that makes p slower than best: of compute
// (recompute, smaller GEMMs), FSDP's copies, exposed communication, offload
// copies, the optimizer step and fixed costs, per token, the one that grew
// most.
func whySlower(p, best *Prediction) string {
	perTok := func(x *Prediction, v float64) float64 { return v / float64(x.TokensPerStep) }
	fixed := func(x *Prediction) float64 {
		return x.StepTimeS - x.ComputeS - x.ExposedCommS - x.OptimizerS - x.OffloadS
	}
	parts := []struct {
		what string
		d    float64
	}{
		{"compute-bound (recompute or lower efficiency)", perTok(p, p.ComputeS-p.copyS) - perTok(best, best.ComputeS-best.copyS)},
		{"copy-bound (FSDP's copies around its collectives: FSDP2's copy-out of each gather, each reduction's copy-in)", perTok(p, p.copyS) - perTok(best, best.copyS)},
		{fmt.Sprintf("comm-bound (%.0f%% of the step is exposed communication)", 100*p.ExposedCommS/p.StepTimeS),
			perTok(p, p.ExposedCommS) - perTok(best, best.ExposedCommS)},
		{"optimizer/offload-bound (host↔device copies, the optimizer over a larger shard or on the host)", perTok(p, p.OffloadS+p.OptimizerS) - perTok(best, best.OffloadS+best.OptimizerS)},
		{"per-micro-step fixed costs", perTok(p, fixed(p)) - perTok(best, fixed(best))},
	}
	loss := 1 - p.TokensPerS/best.TokensPerS
	if loss < 0.01 {
		return fmt.Sprintf("by %.1f%%: as fast within the model's resolution (1%%)", 100*loss)
	}
	top := slices.MaxFunc(parts, func(a, b struct {
		what string
		d    float64
	}) int {
		return cmp.Compare(a.d, b.d)
	})
	return fmt.Sprintf("by %.1f%%: %s", 100*loss, top.what)
}

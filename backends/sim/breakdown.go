package sim

import (
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// SourceSim is the Source of the step breakdowns the sim predicts.
const SourceSim = "sim"

// latencyByKind adds the calibrated per-call latency that calibrateTime put
// into CommS to the kinds' times too, by each kind's calls (collectiveCalls
// split by kind), so the kinds still sum to CommS.
func (p *point) latencyByKind(strategy string, wu wrapUnits, pred *Prediction) {
	if p.cal == nil || p.cal.CollectiveLatencyS == 0 {
		return
	}
	ag, rs, ar := callsByKind(p, strategy, wu)
	lat := p.cal.CollectiveLatencyS
	pred.allGatherS += float64(ag) * lat
	pred.reduceScatterS += float64(rs) * lat
	pred.allReduceS += float64(ar) * lat
}

// callsByKind is collectiveCalls by kind: all-gathers, reduce-scatters and
// all-reduces one rank issues per optimizer step.
func callsByKind(p *point, strategy string, wu wrapUnits) (ag, rs, ar int64) {
	r := p.rc
	if r.WorldSize <= 1 {
		return 0, 0, 0
	}
	ga := int64(r.GradAccum)
	units := int64(len(wu.Units)) + 1 // and the root
	switch strategy {
	case sweeps.FullShard:
		return ga * (2*units - 1), units, 0
	case sweeps.HybridShard:
		return ga * (2*units - 1), units, units
	case sweeps.ShardGradOp:
		return ga * units, units, 0
	case sweeps.NoShard:
		return 0, 0, units
	case sweeps.DDP:
		return 0, 0, ddpCalls(p, units)
	}
	return 0, 0, 0
}

// StepBreakdown is the predicted step as the engines measure theirs (issue
// 27): compute is the model's FLOPs and the optimizer step (both run on the
// device, as a profiler counts them); the collectives run one after another on
// one communicator, so their union is CommS and each kind its own time;
// exposed communication is the part compute does not hide; other is the rest
// of the step (cpu_offload's copies, the calibrated per-micro-step overhead).
// Nil when the figures are beyond a breakdown's bounds (a step over a day).
func (p Prediction) StepBreakdown() *results.StepBreakdown {
	b := &results.StepBreakdown{
		StepS:        p.StepTimeS,
		ComputeS:     p.ComputeS + p.OptimizerS,
		CollectiveS:  p.CommS,
		ExposedCommS: p.ExposedCommS,
		Source:       SourceSim,
	}
	b.OtherS = max(0, b.StepS-b.ComputeS-b.ExposedCommS)
	if kinds := p.allGatherS + p.reduceScatterS + p.allReduceS; kinds > 0 {
		// A prediction read back from JSON has no kinds: then none are given.
		b.AllGatherS, b.ReduceScatterS, b.AllReduceS = results.F64(p.allGatherS), results.F64(p.reduceScatterS), results.F64(p.allReduceS)
	}
	if f, _ := b.Check(); f != "" {
		return nil
	}
	return b
}

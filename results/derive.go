package results

import (
	"encoding/json"
	"math"
	"sort"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Derived holds the figures that compare a run with other runs of the same set. They
// are computed when runs are loaded (Load, Derive), never stored: they depend on
// which runs are present. nil means not computable (see Derive).
type Derived struct {
	// ScalingEfficiency is tokens_per_s_per_rank over that of ScalingBaseline.
	ScalingEfficiency *float64 `json:"scaling_efficiency,omitempty"`
	ScalingBaseline   string   `json:"scaling_baseline,omitempty"`
	// MemorySaving is 1 - peak / the peak of MemoryBaseline; MemorySavingOf names the
	// peak compared (peak_mem_reserved_bytes, or peak_mem_allocated_bytes).
	MemorySaving   *float64 `json:"memory_saving,omitempty"`
	MemoryBaseline string   `json:"memory_baseline,omitempty"`
	MemorySavingOf string   `json:"memory_saving_of,omitempty"`
	// ModelStateBytes is the ZeRO paper's "model states" of one rank (parameters +
	// gradients + optimizer state) from the backend's memory breakdown.
	ModelStateBytes *int64 `json:"model_state_bytes,omitempty"`
}

// pointKey is the comparable form of every axis of a RunConfig (RunConfig itself
// holds a map). Launch details that do not change what is measured (timeout,
// launcher options, the search bookkeeping) are not part of it.
type pointKey struct {
	sweep, backend, launcher, hardware, model                              string
	seqLen, steps, warmupSteps, repeats                                    int
	seed                                                                   int64
	nodes, gpusPerNode, worldSize, batchPerDevice, gradAccum, globalBatch  int
	sharding, backwardPrefetch, mixedPrecision, wrapPolicy, backendOptions string
	ac, forwardPrefetch, cpuOffload, compile                               bool
}

func keyOf(rc *sweeps.RunConfig) pointKey {
	k := pointKey{
		sweep: rc.Sweep, backend: rc.Backend, launcher: rc.Launcher, hardware: rc.Hardware, model: rc.Model,
		seqLen: rc.SeqLen, steps: rc.Steps, warmupSteps: rc.WarmupSteps, repeats: rc.Repeats, seed: rc.Seed,
		nodes: rc.Nodes, gpusPerNode: rc.GPUsPerNode, worldSize: rc.WorldSize, batchPerDevice: rc.BatchPerDevice,
		gradAccum: rc.GradAccum, globalBatch: rc.GlobalBatch, sharding: rc.Sharding,
		backwardPrefetch: rc.BackwardPrefetch, mixedPrecision: rc.MixedPrecision, wrapPolicy: rc.WrapPolicy,
		ac: rc.ActivationCheckpointing, forwardPrefetch: rc.ForwardPrefetch, cpuOffload: rc.CPUOffload,
		compile: rc.Compile,
	}
	k.backendOptions = optionsText(rc.BackendOptions)
	return k
}

// optionsText is the canonical text of backend options (encoding/json sorts map
// keys), so two runs with the same options compare equal.
func optionsText(o map[string]any) string {
	if len(o) == 0 {
		return ""
	}
	b, err := json.Marshal(o)
	if err != nil {
		return "unencodable"
	}
	return string(b)
}

// Derive fills Derived in every run from the others (Load calls it; call it for runs
// built in memory). Both figures exist only when the run and its baseline are ok.
//
// scaling_efficiency: the same config is every axis equal except nodes,
// gpus_per_node, world_size, grad_accum and global_batch (the ones that change with
// the world size under weak scaling, fixed batch_per_device and grad_accum, or
// strong scaling, fixed global_batch). The baseline is the run of the same config at
// the smallest world size present; where several are there, the one with the same
// grad_accum (weak scaling), else the same global_batch (strong scaling), fewest
// nodes first. The smallest world size's own run has efficiency 1; a config run at
// one world size only has none (nil). Above 1 is possible: under sharding each
// rank's share of the optimizer step shrinks as 1/N, which can outweigh the
// added communication (and measured runs are noisy); tables say so in a note.
//
// memory_saving: the baseline is the no_shard run, else the ddp run, with every other
// axis equal. The peaks compared are peak_mem_reserved_bytes when both runs report
// it, else peak_mem_allocated_bytes when both do (PyTorch's reserved includes the
// caching allocator's slack, which is what decides an OOM).
func Derive(runs []Run) {
	scaling := map[pointKey][]int{}
	memory := map[pointKey]map[string]int{}
	for i := range runs {
		runs[i].Derived = Derived{ModelStateBytes: modelStateBytes(runs[i].Metrics.MemBreakdownBytes)}
		rc := &runs[i].Config
		k := keyOf(rc)
		sk := k
		sk.nodes, sk.gpusPerNode, sk.worldSize, sk.gradAccum, sk.globalBatch = 0, 0, 0, 0, 0
		scaling[sk] = append(scaling[sk], i)
		if rc.Sharding == sweeps.NoShard || rc.Sharding == sweeps.DDP {
			mk := k
			mk.sharding = ""
			if memory[mk] == nil {
				memory[mk] = map[string]int{}
			}
			memory[mk][rc.Sharding] = i
		}
	}

	for _, group := range scaling {
		minWS := runs[group[0]].Config.WorldSize
		for _, i := range group {
			minWS = min(minWS, runs[i].Config.WorldSize)
		}
		var smallest []int
		for _, i := range group {
			if runs[i].Config.WorldSize == minWS {
				smallest = append(smallest, i)
			}
		}
		if len(smallest) == len(group) {
			// One world size: nothing scaled, so no efficiency (a 100% would
			// claim a comparison that was never made).
			continue
		}
		sort.Slice(smallest, func(a, b int) bool {
			ra, rb := &runs[smallest[a]].Config, &runs[smallest[b]].Config
			if ra.Nodes != rb.Nodes {
				return ra.Nodes < rb.Nodes
			}
			return ra.ID < rb.ID
		})
		for _, i := range group {
			r := &runs[i]
			base := -1
			for _, j := range smallest {
				if runs[j].Config.GradAccum == r.Config.GradAccum {
					base = j
					break
				}
			}
			if base < 0 {
				for _, j := range smallest {
					if runs[j].Config.GlobalBatch == r.Config.GlobalBatch {
						base = j
						break
					}
				}
			}
			if base < 0 {
				continue
			}
			b := &runs[base]
			if r.Metrics.Status != StatusOK || b.Metrics.Status != StatusOK ||
				r.Metrics.TokensPerSPerRank == nil || b.Metrics.TokensPerSPerRank == nil ||
				*b.Metrics.TokensPerSPerRank <= 0 {
				continue
			}
			eff := *r.Metrics.TokensPerSPerRank / *b.Metrics.TokensPerSPerRank
			if math.IsInf(eff, 0) || math.IsNaN(eff) {
				continue // figures CheckMetrics refuses; unknown rather than +Inf
			}
			r.Derived.ScalingEfficiency = F64(eff)
			r.Derived.ScalingBaseline = b.Config.ID
		}
	}

	for i := range runs {
		r := &runs[i]
		if r.Metrics.Status != StatusOK {
			continue
		}
		mk := keyOf(&r.Config)
		mk.sharding = ""
		bases := memory[mk]
		base, ok := bases[sweeps.NoShard]
		if !ok {
			base, ok = bases[sweeps.DDP]
		}
		if !ok {
			continue
		}
		b := &runs[base]
		if b.Metrics.Status != StatusOK {
			continue
		}
		of, peak, basePeak := SamplePeakReserved, r.Metrics.PeakMemReservedBytes, b.Metrics.PeakMemReservedBytes
		if peak == nil || basePeak == nil {
			of, peak, basePeak = SamplePeakAllocated, r.Metrics.PeakMemAllocatedBytes, b.Metrics.PeakMemAllocatedBytes
		}
		if peak == nil || basePeak == nil || *basePeak <= 0 {
			continue
		}
		saving := 1 - float64(*peak)/float64(*basePeak)
		if math.IsInf(saving, 0) || math.IsNaN(saving) {
			continue
		}
		r.Derived.MemorySaving = F64(saving)
		r.Derived.MemoryBaseline = b.Config.ID
		r.Derived.MemorySavingOf = of
	}
}

// modelStateBytes sums the parameters, gradients and optimizer state a backend
// reported in its memory breakdown; nil when any is missing (unknown, not zero).
func modelStateBytes(b map[string]int64) *int64 {
	p, okP := b["params"]
	g, okG := b["grads"]
	o, okO := b["optimizer"]
	if !okP || !okG || !okO || p < 0 || g < 0 || o < 0 || p > math.MaxInt64-g || p+g > math.MaxInt64-o {
		return nil // missing, or figures that would overflow: unknown, not a wrapped sum
	}
	return I64(p + g + o)
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"

	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Measurement is one measured run as calibration reads it. A zero figure is
// unknown: the run then says nothing about the constants that predict it.
type Measurement struct {
	// Run names the run in the fit's report (its ID); Backend is what measured
	// it: empty for a run ingested from a folder, which no backend ran
	// (Ingested), so that its constants are keyed by its hardware alone and
	// not under the backend its ingest spec named for its configuration
	// (torchrun by default).
	Run      string
	Backend  string
	Ingested bool
	// Config is the run's configuration; its Hardware must name a profile.
	Config sweeps.RunConfig
	// TokensPerS is the measured throughput of all ranks.
	TokensPerS float64
	// AllocatedBytes, ReservedBytes and DeviceBytes are one rank's measured peaks
	// (max_memory_allocated or the trainer's own accounting, max_memory_reserved,
	// NVML); RSSBytes is a rank's peak resident host memory, which on the cpu
	// profile is its whole memory (allocations and the runtime beside them).
	AllocatedBytes, ReservedBytes, DeviceBytes, RSSBytes int64
	// TokensPerSSpread is max / min − 1 of the run's repeats' tokens/s (0 for
	// one repeat), reported beside its leave-one-out error: TokensPerS is their
	// median (results.Normalize), which the fit uses.
	TokensPerSSpread float64
	// Breakdown is where the run's measured step went (issue 27: compute,
	// collectives, exposed communication), nil when it did not measure it. A
	// step time alone cannot tell compute from communication (a faster link and
	// a slower core can give one step time); the breakdown tells them apart, so
	// the fit matches its parts too (breakdownResiduals).
	Breakdown *results.StepBreakdown
}

// Names of the constants in FitReport.Fitted and Kept.
const (
	ConstEfficiency     = "efficiency"
	ConstSizeExponent   = "efficiency_size_exponent"
	ConstIntraBW        = "intra_node_bw_factor"
	ConstInterBW        = "inter_node_bw_factor"
	ConstForwardOverlap = "forward_overlap"
	ConstRankShare      = "rank_share_exponent"
	ConstHostWait       = "host_wait_share"
	ConstReserved       = "reserved_factor"
	ConstOverhead       = "overhead_bytes"
	ConstStepOverhead   = "step_overhead_s"
	ConstLatency        = "collective_latency_s"
	ConstRecompute      = "recompute_share"
	constMemPrefix      = "mem_factors."
)

// ridge pulls each fitted constant (in its unbounded coordinate) towards the
// model's own value, so that a constant the runs barely tell stays where the
// model puts it instead of wandering along a flat valley; it is small enough not
// to bias a constant the runs do tell (the synthetic-recovery test checks). In
// the bounded coordinates (fitRange.bounded) a constant near its range's edge
// lies a few units from its default, where 1e-6 pulled the synthetic size
// exponent 2% off.
const ridge = 1e-8

// A prior on the constants a fit extrapolates with: efficiency's size
// exponent (which carries the fitted sizes' trend to sizes the runs do not
// have) and the recompute share (which carries checkpointed runs' speed to
// others). Fitted freely, both ran to their bounds on llm-foundry's one-node
// rows (size exponent +0.1 on H100, recompute 0.5 on A100 40GB), and the
// calibration then predicted the same table's multi-node rows worse than the
// uncalibrated model (issue 26: 7.8% against 7.2%, 7.0% against 5.2%). Each
// is pulled towards the model's value (0; the uncalibrated recompute share)
// by a Gaussian prior of its width, in units of the runs' own mean squared
// log error, spread over the runs: loss × (1 + Σ(departure/width)²/runs). It
// is the maximum a posteriori fit with the residuals' variance estimated from
// the runs, so runs the model predicts exactly are not pulled, and the more
// runs, the freer the fit.
const (
	priorSizeExponent = 0.05
	priorRecompute    = 0.25
)

// minMemBytes is the least measured memory that enters a fit: below it a
// figure is the accounting's noise, not a peak.
const minMemBytes = 1 << 10

// MaxFolds bounds the refits of the held-out errors: up to MaxFolds runs per
// profile each run is left out alone (leave-one-out); beyond, the runs are dealt
// into MaxFolds folds (run i into fold i mod MaxFolds) and each fold is left out
// at once. Each refit costs time linear in the runs, so leaving each of n runs
// out alone was quadratic (98 runs took over 15 minutes); with the folds bounded
// the whole fit is linear.
const MaxFolds = 20

// FitOptions are Fit's optional settings.
type FitOptions struct {
	// Progress, when not nil, is called as each profile's fits start (done 0) and
	// as its fit to all runs and each of its held-out refits finishes: the
	// profile, how many of its fits are done and how many there are (1 + folds).
	Progress func(profile string, done, total int)
}

// Fit fits the sim's free constants, per hardware profile, to measured runs and
// reports each run's leave-one-out error. The constants (see Constants) are
// compute efficiency with its model-size exponent, the bus bandwidth factors,
// the forward all-gather overlap, a factor per memory category, the reserved /
// allocated factor and the device overhead; each is fitted only where the runs
// tell it (a size exponent needs two model sizes, a reserved factor runs that
// measure both figures) and kept at the model's value otherwise, with why.
func Fit(ms []Measurement) (*Calibration, error) {
	return FitContext(context.Background(), ms, FitOptions{})
}

// FitContext is Fit that stops, returning ctx's error, as soon as ctx is done
// (the minimiser checks it between evaluations), and reports progress.
func FitContext(ctx context.Context, ms []Measurement, opts FitOptions) (*Calibration, error) {
	if len(ms) == 0 {
		return nil, errors.New("no measured runs to fit")
	}
	groups := map[string][]sample{}
	for i, m := range ms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, err := newSample(m)
		if err != nil {
			return nil, fmt.Errorf("run %s (%d of %d): %w", m.Run, i+1, len(ms), err)
		}
		// One set of constants per hardware and measuring backend: two trainers
		// on one machine differ (the Go trainer's allocations against torch's
		// RSS on the cpu profile, say).
		key := s.hw
		if m.Backend != "" {
			key += "/" + m.Backend
		}
		if g := groups[key]; len(g) > 0 && g[0].hwFile != s.hwFile {
			// One name, two profiles (two files, or a file named like a
			// built-in profile): the key could not tell their constants apart.
			return nil, fmt.Errorf("runs %s and %s ran on two hardware profiles named %s (%s and %s): give the profile files distinct name: keys to calibrate them",
				g[0].m.Run, m.Run, s.hw, profileWhere(g[0].hwFile), profileWhere(s.hwFile))
		}
		groups[key] = append(groups[key], s)
	}
	progress := func(string, int, int) {}
	if opts.Progress != nil {
		progress = opts.Progress
	}
	cal := &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{}}
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		g := groups[key]
		hw := g[0].hw
		folds := 0
		if len(g) > 1 {
			folds = min(len(g), MaxFolds)
		}
		progress(key, 0, 1+folds)
		k, err := fitGroup(ctx, g, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		progress(key, 1, 1+folds)
		backs := map[string]bool{}
		for _, s := range g {
			if s.m.Backend != "" {
				backs[s.m.Backend] = true
			}
			if s.m.Ingested {
				k.Fit.Ingested++
			}
		}
		if len(backs) > 0 {
			k.Fit.Backends = slices.Sorted(maps.Keys(backs))
		}
		k.ProfileFile = g[0].hwFile
		k.Fit.Folds = folds
		k.Fit.LeaveOneOut = make([]LOORow, len(g))
		for i := range g {
			row := LOORow{Run: g[i].m.Run, Backend: g[i].m.Backend}
			if sp := g[i].m.TokensPerSSpread; sp > 0 {
				row.TputSpread = &sp
			}
			k.Fit.LeaveOneOut[i] = row
		}
		for f := range folds {
			// Fold f holds runs f, f+folds, f+2·folds...: dealt, not cut in
			// blocks, so that no fold takes a whole corner of a sorted grid.
			var rest, out []int
			for i := range g {
				if i%folds == f {
					out = append(out, i)
				} else {
					rest = append(rest, i)
				}
			}
			rs := make([]sample, 0, len(rest))
			for _, i := range rest {
				rs = append(rs, g[i])
			}
			kl, err := fitGroup(ctx, rs, &k)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err == nil {
				for _, i := range out {
					k.Fit.LeaveOneOut[i].MemErr, k.Fit.LeaveOneOut[i].TputErr = g[i].errors(hw, &kl)
				}
			}
			progress(key, 2+f, 1+folds)
		}
		cal.Profiles[key] = k
	}
	return cal, nil
}

// sample is a measurement with what the uncalibrated model says of it.
type sample struct {
	m  Measurement
	hw string
	// hwFile is the profile file of a user-defined profile, "" for a built-in one.
	hwFile string
	P      int64            // parameters
	mem    map[string]int64 // the uncalibrated breakdown
	// opts are the sim options the run is predicted under (measuredOptions).
	opts Options
	// comm flags: which links the run's collectives cross; interStated: its
	// links across nodes are stated (a fabric, nccl-tests, a bus bandwidth).
	intra, inter, fwdGather, interStated bool
	// ac: the run checkpoints activations (it tells the recompute share).
	ac     bool
	gpu    bool
	defEff float64
	// defRecompute is the recompute share the run is predicted with
	// uncalibrated (recomputeShare): where the fit starts and its ridge pulls.
	defRecompute float64
	tokens       float64 // per step
}

func newSample(m Measurement) (sample, error) {
	// The backend stays: the model predicts a trainer's runs under what that
	// trainer does (BackendAssumptions), and a run the sim states (backend sim)
	// under its own backend_options: the loss, checkpointing policy, FSDP
	// version and fabric it really ran with.
	rc := m.Config
	opts, err := measuredOptions(rc)
	if err != nil {
		return sample{}, err
	}
	pred, err := predict(rc, opts)
	if err != nil {
		return sample{}, fmt.Errorf("the sim cannot predict it: %w", err)
	}
	s := sample{m: m, opts: opts, hw: pred.Hardware.Name, hwFile: absPath(pred.Hardware.File), P: pred.Shape.Params(), mem: pred.Breakdown, defEff: pred.Hardware.Efficiency,
		gpu: pred.Hardware.IsGPU, tokens: float64(pred.TokensPerStep)}
	p := pred.Strategy
	ws, nodes := pred.CommBytesPerStep, max(rc.Nodes, 1)
	moves := ws.AllGather+ws.ReduceScatter+ws.AllReduce > 0
	s.inter = moves && nodes > 1
	s.intra = moves && (nodes == 1 || p == sweeps.HybridShard)
	// The Go trainer on a host hides no forward all-gather it did not prefetch
	// (gotrainHostSchedule): forward_overlap does not enter its prediction.
	hostSchedule := pred.Assumptions.Trainer == TrainerGotrain && !pred.Hardware.IsGPU
	s.fwdGather = ws.AllGather > 0 && !rc.ForwardPrefetch && !hostSchedule
	s.interStated = len(opts.Links.Inter) > 0 || opts.InterNodeBusBW > 0
	s.ac = rc.ActivationCheckpointing
	s.defRecompute = uncalibratedRecomputeShare(pred.Hardware.IsGPU, pred.Assumptions.Trainer)
	return s, nil
}

// breakdownFloor is the share of the measured step added to both sides of a
// breakdown part's log ratio: a part near zero (the exposed communication of a
// prefetching run, say) then weighs by its error as a share of the step
// instead of by a ratio of two tiny numbers, and a part that is most of the
// step by its relative error, as the step time does.
const breakdownFloor = 0.01

// breakdownParts is how many residuals breakdownResiduals gives a run.
const breakdownParts = 3

// partsFloor is the least variance partsLoss gives a kind of residual: a 1%
// error, below which a timing on a shared machine tells nothing.
const partsFloor = 1e-4

// partsLoss is the loss of a fit to step times and their measured parts:
// minus the log-likelihood of the residuals with a variance per kind (step,
// compute, collectives, exposed) left free, Σ n_k·log(SS_k/n_k), which is
// least squares weighted by each kind's own error, found with the constants
// (feasible generalised least squares in one minimisation). A kind the model
// predicts poorly (the collectives' waits for ranks the host has not run yet,
// which no bandwidth predicts) then weighs less than the step time it
// predicts well, instead of dragging the step's constants towards itself; a
// kind it can predict pins the constants the step time alone leaves free.
func partsLoss(ss []float64, n []int) float64 {
	var v float64
	total := 0
	for k := range ss {
		if n[k] > 0 {
			v += float64(n[k]) * math.Log(ss[k]/float64(n[k])+partsFloor)
			total += n[k]
		}
	}
	return v / float64(total)
}

// breakdownResiduals are the log errors of the parts of the predicted step
// against the measured breakdown b: compute (what the efficiency and the rank
// share tell), collective time (the bandwidth factors and the per-call
// latency) and exposed communication (the overlap), each on the scale of the
// step time's own residual (a log ratio). None when b is nil, or not a
// measurement.
func breakdownResiduals(pred Prediction, b *results.StepBreakdown) []float64 {
	if b == nil || b.StepS <= 0 || b.Source == SourceSim {
		return nil
	}
	eps := breakdownFloor * b.StepS
	r := func(p, m float64) float64 { return math.Log((max(p, 0) + eps) / (max(m, 0) + eps)) }
	return []float64{
		r(pred.ComputeS+pred.OptimizerS, b.ComputeS),
		r(pred.CommS, b.CollectiveS),
		r(pred.ExposedCommS, b.ExposedCommS),
	}
}

// fittedOptions are the sim options that set what the fit fits (efficiency,
// reserved_factor, a calibration) or nothing about the run (sleep_per_step):
// a measured run's own would pin the constants the fit moves, so the fit drops
// them.
var fittedOptions = []string{"efficiency", "reserved_factor", "calibration", "sleep_per_step"}

// measuredOptions are the sim options a measured run is predicted under: a sim
// run's backend_options (as the user stated the stack: loss, checkpointing,
// attention, fsdp_version, fabric, nccl_tests) less fittedOptions, and for every
// run what its env changes (NCCL_IB_DISABLE: the tcp fabric). Another backend's
// options are that backend's, not the sim's: its assumptions come from
// BackendAssumptions. A run of no named backend (ingested from a folder) keeps
// the options the sim knows, as a spec stated them for it.
func measuredOptions(rc sweeps.RunConfig) (Options, error) {
	switch rc.Backend {
	case Name:
	case "":
		known := map[string]any{}
		for k, v := range rc.BackendOptions {
			if _, ok := optionTable[k]; ok {
				known[k] = v
			}
		}
		rc.BackendOptions = known
	default:
		rc.BackendOptions = nil
	}
	m, _ := envOptions(rc)
	m = maps.Clone(m)
	for _, k := range fittedOptions {
		delete(m, k)
	}
	opts, err := ParseOptions(m)
	if err != nil {
		return Options{}, fmt.Errorf("its backend_options: %w", err)
	}
	// Alternatives are for people reading a verdict; a fit predicts each run
	// hundreds of times.
	opts.noVerdict = true
	return opts, nil
}

// predictWith predicts the sample with constants k for its hardware, under
// the run's own options.
func (s *sample) predictWith(hw string, k *Constants) (Prediction, error) {
	opts := s.opts
	kk := *k
	kk.ProfileFile = s.hwFile // the constants apply to the run's kind of profile (lookup)
	opts.Calibration = &Calibration{Profiles: map[string]Constants{hw: kk}}
	return predict(s.m.Config, opts)
}

// errors are the sample's prediction errors (predicted / measured − 1) under k.
func (s *sample) errors(hw string, k *Constants) (mem, tput *float64) {
	pred, err := s.predictWith(hw, k)
	if err != nil {
		return nil, nil
	}
	switch {
	case s.m.AllocatedBytes >= minMemBytes:
		e := float64(pred.PeakMemAllocatedBytes)/float64(s.m.AllocatedBytes) - 1
		mem = &e
	case s.rssOnly():
		e := float64(pred.PeakDeviceMemBytes)/float64(s.m.RSSBytes) - 1
		mem = &e
	}
	if s.m.TokensPerS > 0 {
		e := pred.TokensPerS/s.m.TokensPerS - 1
		tput = &e
	}
	return mem, tput
}

// rssOnly says the sample's only memory figure is the host RSS of a cpu run
// (torch on CPU has no allocator statistics).
func (s *sample) rssOnly() bool {
	return s.m.AllocatedBytes < minMemBytes && s.m.RSSBytes >= minMemBytes && !s.gpu
}

// param is one fitted constant: its name, its unbounded coordinate's default,
// and how to set it from that coordinate.
type param struct {
	name string
	def  float64
	set  func(k *Constants, x float64)
	// get is set's inverse, for a fit that starts from earlier constants.
	get func(k *Constants) float64
}

// fitGroup fits one hardware profile's constants to its samples, starting from
// start's where given (a leave-one-out fit starts from the fit to all runs).
func fitGroup(ctx context.Context, g []sample, start *Constants) (Constants, error) {
	k := Constants{Fit: FitReport{Runs: len(g)}}
	hw := g[0].hw
	keep := func(name, why string) { k.Fit.Kept = append(k.Fit.Kept, name+": "+why) }

	// Throughput: efficiency (and its size exponent), bandwidths, overlap,
	// recompute, each inside its plausible range (rangesFor).
	var ts []sample
	sizes := map[int64]bool{}
	var intra, inter, fwd, ac bool
	interStated := true
	for _, s := range g {
		if s.m.TokensPerS > 0 {
			ts = append(ts, s)
			sizes[s.P] = true
			intra, inter, fwd, ac = intra || s.intra, inter || s.inter, fwd || s.fwdGather, ac || s.ac
			if s.inter && !s.interStated {
				interStated = false
			}
		}
	}
	rg := rangesFor(g[0].gpu, inter && interStated)
	k.Efficiency = min(g[0].defEff, rg.efficiency.hi)
	if len(ts) == 0 {
		keep(ConstEfficiency, "no run measured throughput")
	} else {
		k.Fit.Range = fitRangeOf(ts)
		// in is a constant fitted inside r, starting from the model's value def.
		in := func(name string, r fitRange, def float64, dst func(k *Constants) *float64) param {
			return param{name, r.unbounded(def), func(k *Constants, x float64) { *dst(k) = r.bounded(x) },
				func(k *Constants) float64 { return r.unbounded(*dst(k)) }}
		}
		ps := []param{in(ConstEfficiency, rg.efficiency, rg.efficiency.clamp(g[0].defEff), func(k *Constants) *float64 { return &k.Efficiency })}
		if len(sizes) > 1 {
			ps = append(ps, in(ConstSizeExponent, rg.sizeExponent, 0, func(k *Constants) *float64 { return &k.EfficiencySizeExponent }))
		} else {
			keep(ConstSizeExponent, "every run has the same model size")
		}
		if intra {
			ps = append(ps, in(ConstIntraBW, rg.intraBW, 1, func(k *Constants) *float64 { return &k.IntraNodeBWFactor }))
		} else {
			keep(ConstIntraBW, "no run communicates inside a node")
		}
		if inter {
			ps = append(ps, in(ConstInterBW, rg.interBW, 1, func(k *Constants) *float64 { return &k.InterNodeBWFactor }))
		} else {
			keep(ConstInterBW, "no run spans nodes")
		}
		if ac {
			ps = append(ps, param{ConstRecompute, rg.recompute.unbounded(rg.recompute.clamp(ts[0].defRecompute)), func(k *Constants, x float64) {
				v := rg.recompute.bounded(x)
				k.RecomputeShare = &v
			}, func(k *Constants) float64 {
				if k.RecomputeShare == nil {
					return math.NaN()
				}
				return rg.recompute.unbounded(*k.RecomputeShare)
			}})
		} else {
			keep(ConstRecompute, "no run checkpoints activations: recompute costs what its FLOPs do")
		}
		if fwd {
			ps = append(ps, param{ConstForwardOverlap, 0, func(k *Constants, x float64) {
				v := 1 / (1 + math.Exp(-x))
				k.ForwardOverlap = &v
			}, func(k *Constants) float64 {
				if k.ForwardOverlap == nil {
					return math.NaN()
				}
				return math.Log(*k.ForwardOverlap / (1 - *k.ForwardOverlap))
			}})
		} else {
			keep(ConstForwardOverlap, "no run all-gathers in forward without forward_prefetch")
		}
		if hosts := ranksPerHost(ts); len(hosts) > 1 {
			// 2·sigmoid: the bounds [0, 2], the model's 1 at 0.
			ps = append(ps, param{ConstRankShare, 0, func(k *Constants, x float64) {
				v := min(2/(1+math.Exp(-x)), maxRankShareExponent)
				k.RankShareExponent = &v
			}, func(k *Constants) float64 {
				if k.RankShareExponent == nil {
					return math.NaN()
				}
				e := *k.RankShareExponent / 2
				return math.Log(e / (1 - e))
			}})
		} else if !ts[0].gpu {
			keep(ConstRankShare, "every run has the same number of ranks on a host")
		}
		// Where the ranks share a host and communicate, a measured breakdown
		// tells how much of the sharing's cost is spent waiting in collectives.
		shared := false
		for _, s := range ts {
			if s.m.Breakdown != nil && !s.gpu && (s.intra || s.inter) && ranksPerNode(s.m.Config) > 1 {
				shared = true
			}
		}
		switch {
		case shared:
			ps = append(ps, param{ConstHostWait, 0, func(k *Constants, x float64) {
				v := 1 / (1 + math.Exp(-x))
				k.HostWaitShare = &v
			}, func(k *Constants) float64 {
				if k.HostWaitShare == nil {
					return math.NaN()
				}
				return math.Log(*k.HostWaitShare / (1 - *k.HostWaitShare))
			}})
		case !ts[0].gpu:
			keep(ConstHostWait, "no run that shares a host among communicating ranks measured its step breakdown")
		}
		// The fixed costs start at a share of the runs' typical step, not near 0:
		// in the log coordinate a negligible cost is a plateau the search cannot
		// leave.
		var steps []float64
		for _, s := range ts {
			steps = append(steps, s.tokens/s.m.TokensPerS)
		}
		step := median(steps)
		ps = append(ps, param{ConstStepOverhead, math.Log(min(0.01*step, rg.stepOverheadS.hi/2)), func(k *Constants, x float64) {
			k.StepOverheadS = min(math.Exp(x), rg.stepOverheadS.hi)
		}, func(k *Constants) float64 { return math.Log(k.StepOverheadS) }})
		if intra || inter {
			ps = append(ps, param{ConstLatency, math.Log(min(1e-3*step, rg.latencyS.hi/2)), func(k *Constants, x float64) {
				k.CollectiveLatencyS = min(math.Exp(x), rg.latencyS.hi)
			}, func(k *Constants) float64 { return math.Log(k.CollectiveLatencyS) }})
		} else {
			keep(ConstLatency, "no run communicates")
		}
		parts := false
		for _, s := range ts {
			parts = parts || s.m.Breakdown != nil
		}
		if len(ts) < len(ps) {
			// As many unknowns as equations or more: any such fit matches its
			// runs exactly and says little about the next one.
			k.Fit.Warnings = append(k.Fit.Warnings, fmt.Sprintf("%s: %d throughput constants fitted to %d run(s), so the fit matches them whatever the model's error; "+
				"measure more runs (other batch sizes, world sizes, strategies) before trusting its predictions", hw, len(ps), len(ts)))
		}
		// prior pulls the two constants that extrapolate towards the model's
		// values (see priorSizeExponent); efficiency, what a calibration is
		// for, moves freely inside its range.
		defRecompute := rg.recompute.clamp(ts[0].defRecompute)
		prior := func(k *Constants, n int) float64 {
			var v float64
			if len(sizes) > 1 {
				v += math.Pow(k.EfficiencySizeExponent/priorSizeExponent, 2)
			}
			if ac && k.RecomputeShare != nil {
				v += math.Pow((*k.RecomputeShare-defRecompute)/priorRecompute, 2)
			}
			return v / float64(n)
		}
		loss := func(k *Constants) float64 {
			var ss [1 + breakdownParts]float64 // squared residuals by kind: step, then the parts
			var n [1 + breakdownParts]int
			for i := range ts {
				pred, err := ts[i].predictWith(hw, k)
				if err != nil || !(pred.TokensPerS > 0) {
					return math.Inf(1)
				}
				r := math.Log(pred.TokensPerS / ts[i].m.TokensPerS)
				ss[0], n[0] = ss[0]+r*r, n[0]+1
				for j, r := range breakdownResiduals(pred, ts[i].m.Breakdown) {
					ss[1+j], n[1+j] = ss[1+j]+r*r, n[1+j]+1
				}
			}
			// The prior's weight is the runs' own mean squared error: runs the
			// model fits exactly (the synthetic recovery tests) are not pulled.
			mse := ss[0] / float64(n[0])
			if !parts {
				return mse * (1 + prior(k, len(ts)))
			}
			return partsLoss(ss[:], n[:]) + mse*prior(k, len(ts))
		}
		if err := minimize(ctx, &k, ps, loss, start); err != nil {
			return k, fmt.Errorf("throughput fit: %w", err)
		}
		for _, p := range ps {
			k.Fit.Fitted = append(k.Fit.Fitted, p.name)
		}
	}

	// Memory: a factor per category the runs' allocations hold; where a cpu
	// run measures only its RSS, the runtime's own memory beside them too.
	var msamp, rss []sample
	for _, s := range g {
		switch {
		case s.m.AllocatedBytes >= minMemBytes:
			msamp = append(msamp, s)
		case s.rssOnly():
			rss = append(rss, s)
		}
	}
	switch {
	case len(msamp) > 0:
		if err := fitMemory(&k, msamp, false, rg); err != nil {
			return k, fmt.Errorf("memory fit: %w", err)
		}
	case len(rss) > 0:
		if err := fitMemory(&k, rss, true, rg); err != nil {
			return k, fmt.Errorf("memory fit: %w", err)
		}
	default:
		keep("mem_factors", "no run measured allocated memory (or, on cpu, its RSS)")
	}

	// Reserved / allocated, and what the device holds beyond reserved: read
	// off the runs that measure both figures (GPU runs).
	var ratios, over []float64
	for _, s := range g {
		if s.m.ReservedBytes >= minMemBytes && s.m.AllocatedBytes >= minMemBytes {
			ratios = append(ratios, math.Log(float64(s.m.ReservedBytes)/float64(s.m.AllocatedBytes)))
		}
		// The memory outside the allocator: device beside reserved on a GPU, the
		// process's RSS beside its allocations on the cpu profile.
		switch {
		case s.gpu && s.m.DeviceBytes > 0 && s.m.ReservedBytes > 0 && s.m.DeviceBytes >= s.m.ReservedBytes:
			over = append(over, float64(s.m.DeviceBytes-s.m.ReservedBytes))
		case !s.gpu && s.m.RSSBytes > 0 && s.m.AllocatedBytes > 0 && s.m.RSSBytes >= s.m.AllocatedBytes:
			over = append(over, float64(s.m.RSSBytes-s.m.AllocatedBytes))
		}
	}
	if len(ratios) > 0 {
		k.ReservedFactor = rg.reserved.clamp(math.Exp(median(ratios)))
		k.Fit.Fitted = append(k.Fit.Fitted, ConstReserved)
	} else {
		keep(ConstReserved, "no run measured both allocated and reserved memory")
	}
	switch {
	case k.OverheadBytes != nil: // fitted with the factors, from RSS
	case len(over) > 0:
		v := int64(min(median(over), rg.overheadBytes))
		k.OverheadBytes = &v
		k.Fit.Fitted = append(k.Fit.Fitted, ConstOverhead)
	default:
		keep(ConstOverhead, "no run measured device memory (NVML) beside reserved, or RSS beside allocations")
	}
	return k, nil
}

// minimize fits ps to minimise loss (plus the ridge) with Nelder-Mead, and
// leaves the best constants in k. From start (a held-out refit, warm-started at
// the fit to all runs, which is near its answer) the simplex starts small and is
// not rebuilt: a full-size simplex threw the warm start away. It stops with
// ctx's error as soon as ctx is done.
func minimize(ctx context.Context, k *Constants, ps []param, loss func(*Constants) float64, start *Constants) error {
	if len(ps) == 0 {
		return nil
	}
	apply := func(x []float64) *Constants {
		c := *k
		if k.MemFactors != nil {
			c.MemFactors = maps.Clone(k.MemFactors)
		}
		for i, p := range ps {
			p.set(&c, x[i])
		}
		return &c
	}
	f := func(x []float64) float64 {
		v := loss(apply(x))
		for i, p := range ps {
			d := x[i] - p.def
			v += ridge * d * d
		}
		return v
	}
	x := make([]float64, len(ps))
	for i, p := range ps {
		x[i] = p.def
		if start != nil {
			if v := p.get(start); !math.IsNaN(v) && !math.IsInf(v, 0) {
				x[i] = v
			}
		}
	}
	// Nelder-Mead needs no gradient (the model has min/max kinks); a restart
	// from its answer rebuilds the simplex, which gets it out of a collapsed one.
	best := math.Inf(1)
	restarts, simplex := 3, 1.0
	conv := &optimize.FunctionConverge{Absolute: 1e-15, Relative: 1e-13, Iterations: 200}
	if start != nil {
		// A held-out error is read to a tenth of a percent: the loss (mean squared
		// log error) need not settle to 13 digits for that.
		restarts, simplex = 1, 0.1
		conv = &optimize.FunctionConverge{Absolute: 1e-12, Relative: 1e-6, Iterations: 50}
	}
	status := func() (optimize.Status, error) {
		if err := ctx.Err(); err != nil {
			return optimize.Failure, err
		}
		return optimize.NotTerminated, nil
	}
	for range restarts {
		res, err := optimize.Minimize(optimize.Problem{Func: f, Status: status}, x, &optimize.Settings{
			FuncEvaluations: 20000,
			Converger:       conv,
		}, &optimize.NelderMead{SimplexSize: simplex})
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil && res == nil {
			return err
		}
		if math.IsInf(res.F, 0) || math.IsNaN(res.F) {
			return errors.New("no constants predict every run")
		}
		copy(x, res.X)
		if res.F >= best*(1-1e-9) {
			break // the restart found nothing better
		}
		best = res.F
	}
	*k = *apply(x)
	return nil
}

// ranksPerHost is the set of ranks-per-host counts of the host-profile (cpu)
// samples among g: two or more tell the rank share exponent.
func ranksPerHost(g []sample) map[int]bool {
	out := map[int]bool{}
	for _, s := range g {
		if !s.gpu {
			out[ranksPerNode(s.m.Config)] = true
		}
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// fitMemory fits a factor per memory category: the allocated peak is linear in
// them (Σ factor × category bytes), so weighted linear least squares (gonum's QR
// solve) finds them exactly, minimising the squared relative error, with the
// ridge's rows pulling each towards 1. With rss the target is the run's RSS and
// a constant (the runtime's own memory, overhead_bytes) is fitted beside them.
// Factors are then bounded to rg.
func fitMemory(k *Constants, ms []sample, rss bool, rg plausibleRanges) error {
	var cats []string
	for _, cat := range memCategories {
		for _, s := range ms {
			if s.mem[cat] > 0 {
				cats = append(cats, cat)
				break
			}
		}
	}
	if len(cats) == 0 {
		return errors.New("the model predicts no memory for these runs")
	}
	n, kc := len(ms), len(cats)
	cols := kc
	if rss {
		cols++
	}
	a := mat.NewDense(n+kc, cols, nil)
	y := mat.NewVecDense(n+kc, nil)
	for i, s := range ms {
		target := float64(s.m.AllocatedBytes)
		if rss {
			target = float64(s.m.RSSBytes)
			a.Set(i, kc, 1/target)
		}
		for j, cat := range cats {
			a.Set(i, j, float64(s.mem[cat])/target)
		}
		y.SetVec(i, 1)
	}
	r := math.Sqrt(ridge)
	for j := range cats {
		a.Set(n+j, j, r)
		y.SetVec(n+j, r)
	}
	var f mat.VecDense
	if err := f.SolveVec(a, y); err != nil {
		return err
	}
	k.MemFactors = map[string]float64{}
	for j, cat := range cats {
		k.MemFactors[cat] = rg.memFactor.clamp(f.AtVec(j))
		k.Fit.Fitted = append(k.Fit.Fitted, constMemPrefix+cat)
	}
	if rss {
		v := int64(min(max(f.AtVec(kc), 0), rg.overheadBytes))
		k.OverheadBytes = &v
		k.Fit.Fitted = append(k.Fit.Fitted, ConstOverhead)
	}
	return nil
}

// Measurements picks the runs calibration can use: measured (not predicted),
// ok, with a throughput or a memory figure, on a known hardware profile (a run
// configured as auto names the profile it ran on in env.hardware). skipped says
// why each other run was left out.
//
// A whole-run throughput (results' †: the script's whole wall time, start-up and
// warm-up included, as ingested seed metrics.json and Trainer output_dirs give
// it) is no steady state, and fitting the step model to it biases every
// constant: its tokens/s is left out unless wholeRun, and its memory kept.
func Measurements(runs []results.Run, wholeRun bool) (ms []Measurement, skipped []string) {
	for i := range runs {
		r := &runs[i]
		m := &r.Metrics
		id := r.Config.ID
		switch {
		case m.Predicted:
			skipped = append(skipped, id+": predicted, not measured")
			continue
		case m.Status != results.StatusOK:
			skipped = append(skipped, id+": status "+string(m.Status))
			continue
		}
		rc := r.Config
		if rc.Hardware == "" || rc.Hardware == hardware.Auto {
			rc.Hardware = m.Env.Hardware
		}
		if _, err := hardware.Lookup(rc.Hardware); err != nil {
			if hardware.IsFile(rc.Hardware) {
				// A user-defined profile: its file, as the run recorded it,
				// must still read.
				skipped = append(skipped, fmt.Sprintf("%s: its hardware profile file does not read: %v", id, err))
				continue
			}
			skipped = append(skipped, fmt.Sprintf("%s: hardware %q is not a profile (set hardware in the spec or ingest options)", id, rc.Hardware))
			continue
		}
		meas := Measurement{Run: id, Backend: rc.Backend, Config: rc}
		if ingested(m) {
			// No backend ran it: its ingest spec's backend (torchrun unless
			// --spec says) only chose the assumptions it is predicted under.
			meas.Backend, meas.Ingested = "", true
		}
		if m.TokensPerS != nil && *m.TokensPerS > 0 {
			if m.WholeRunWallTime && !wholeRun {
				skipped = append(skipped, id+": tokens/s over the whole run's wall time (†: start-up and warm-up included), not steady state: "+
					"left out of the throughput fit (--whole-run keeps it)")
			} else {
				meas.TokensPerS = *m.TokensPerS
			}
		}
		get := func(p *int64) int64 {
			if p == nil || *p < 0 {
				return 0
			}
			return *p
		}
		meas.AllocatedBytes, meas.ReservedBytes, meas.DeviceBytes = get(m.PeakMemAllocatedBytes), get(m.PeakMemReservedBytes), get(m.PeakDeviceMemBytes)
		meas.RSSBytes = get(m.PeakRSSBytes)
		meas.TokensPerSSpread = spread(m.Samples["tokens_per_s"])
		if b := m.StepBreakdown; b != nil && meas.TokensPerS > 0 && b.Source != SourceSim {
			if f, _ := b.Check(); f == "" && b.StepS > 0 {
				bb := *b
				meas.Breakdown = &bb
			}
		}
		if meas.TokensPerS == 0 && meas.AllocatedBytes == 0 && meas.RSSBytes == 0 {
			skipped = append(skipped, id+": measures neither tokens/s nor memory")
			continue
		}
		ms = append(ms, meas)
	}
	return ms, skipped
}

// absPath is path made absolute ("" stays ""): a calibration names the profile
// file its runs ran on wherever it is read from.
func absPath(path string) string {
	if path == "" {
		return ""
	}
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// profileWhere names a profile's source: its file, or the built-in table.
func profileWhere(file string) string {
	if file == "" {
		return "the built-in profile"
	}
	return "the file " + file
}

// ingested says m is a run `fsdpbench ingest` wrote from a folder of a past
// run: only those name their folders in extra (package ingest's source_dir and
// source_dirs keys, which the harness reads the same way).
func ingested(m *results.Metrics) bool {
	_, one := m.Extra["source_dir"]
	_, many := m.Extra["source_dirs"]
	return one || many
}

// spread is max / min − 1 of positive samples, 0 when fewer than two.
func spread(xs []float64) float64 {
	lo, hi := math.Inf(1), 0.0
	n := 0
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 1) {
			lo, hi, n = min(lo, x), max(hi, x), n+1
		}
	}
	if n < 2 {
		return 0
	}
	return hi/lo - 1
}

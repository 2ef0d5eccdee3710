package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// CalibrationVersion is the version of the calibration file format this build
// writes and reads. A file of another version is refused with what to do.
const CalibrationVersion = 1

// CalibrationFile is the name `fsdpbench calibrate` gives its output inside a
// results directory, where `recommend` looks for it by default.
const CalibrationFile = "calibration.json"

// calibrationLimits bounds a calibration file: a handful of profiles with a
// leave-one-out row per fitted run (a few hundred bytes each).
var calibrationLimits = input.Limits{What: "calibration file", MaxBytes: 8 << 20, MaxDepth: 16, UniqueKeys: true}

// Calibration holds the sim's free constants fitted to measured runs, per
// hardware profile: what `fsdpbench calibrate` writes and the sim loads (the
// backend option calibration, or --calibration).
type Calibration struct {
	Version int `json:"version"`
	// Profiles maps a hardware profile name (h100-sxm, cpu, ...), or a profile
	// and the backend that measured the runs ("cpu/gotrain"), to its constants.
	// A run takes its hardware and backend's, else its hardware's, else the one
	// entry of its hardware there is. Runs no backend ran (ingested from
	// folders) are keyed by their hardware alone. A user-defined profile (a
	// profile file) is keyed by the name it gives itself, and its constants
	// name the file (Constants.ProfileFile).
	Profiles map[string]Constants `json:"profiles"`
	// path is where the file was read from, for notes and errors.
	path string
}

// Constants are the sim's free constants for one hardware profile. A zero (or
// absent) figure keeps the model's own value.
type Constants struct {
	// ProfileFile is the profile file of a user-defined hardware profile
	// (hardware: ./my-gpu.yaml) the runs ran on; empty for a built-in profile.
	// Its key is the profile's name, which no built-in profile has, so the file
	// says which profile the constants belong to; they apply to predictions on
	// a profile file of that name, and never to a built-in profile.
	ProfileFile string `json:"profile_file,omitempty"`
	// Efficiency is the fraction of peak FLOP/s the step's matmuls reach (on a GPU;
	// attention and the elementwise kernels keep their own rates) for a
	// model of RefParams parameters; a model of P parameters reaches
	// Efficiency × (P/RefParams)^EfficiencySizeExponent (bigger GEMMs run closer
	// to peak), clamped to [0.001, MaxCalibratedEfficiency], the model size held
	// inside the fitted range (Fit.Range) where there is one.
	Efficiency             float64 `json:"efficiency"`
	EfficiencySizeExponent float64 `json:"efficiency_size_exponent"`
	// IntraNodeBWFactor and InterNodeBWFactor scale the profile's bus bandwidths:
	// the fraction of the nominal link the collectives reach.
	IntraNodeBWFactor float64 `json:"intra_node_bw_factor,omitempty"`
	InterNodeBWFactor float64 `json:"inter_node_bw_factor,omitempty"`
	// ForwardOverlap is the share of forward all-gathers hidden behind compute
	// without forward_prefetch (the model assumes 0.5).
	ForwardOverlap *float64 `json:"forward_overlap,omitempty"`
	// RankShareExponent applies to a host profile (the cpu, where the ranks of
	// a node share one host's cores): a rank computes at the host's peak ×
	// (1/ranks on the host)^RankShareExponent. The model assumes 1, the cores
	// divided evenly and each as fast alone as beside the others; a small
	// model's GEMMs and elementwise loops scale poorly over threads, so one rank
	// with every core is far from the sum of ranks with one each, and the
	// exponent measured falls below 1 (0: a rank as fast beside the others as
	// alone).
	RankShareExponent *float64 `json:"rank_share_exponent,omitempty"`
	// HostWaitShare applies where RankShareExponent does, to runs that
	// communicate: the share of the time sharing the host costs each rank
	// (its compute × (1 − ranks^−RankShareExponent)) that the rank spends
	// waiting inside a collective for a peer the host's scheduler has not run
	// yet, rather than computing. It moves that time from compute to exposed
	// communication and leaves the step unchanged, so only a measured step
	// breakdown tells it (issue 27: on 2 cores a 427 kB all-reduce "takes" 2 ms
	// at 2 ranks and 12 ms at 4, which no bandwidth predicts); nil: none, all
	// of it compute.
	HostWaitShare *float64 `json:"host_wait_share,omitempty"`
	// RecomputeShare is the share of activation checkpointing's recompute the
	// model counts (the forward run again, at the step's efficiency) that the
	// step really pays: fitted where the runs checkpoint (published
	// checkpointed runs reach a higher hardware utilisation than plain ones,
	// so their recompute costs less than its FLOPs say); nil keeps the model's
	// 1, so an uncalibrated prediction, or one calibrated by runs that never
	// checkpoint, pays the recompute in full.
	RecomputeShare *float64 `json:"recompute_share,omitempty"`
	// StepOverheadS is a fixed time per micro-step the model's FLOPs and bytes
	// do not account for (kernel launches, the framework's Python, the Go
	// scheduler), in seconds; CollectiveLatencyS is the fixed cost of one
	// collective call (the α of the α-β model; bus bandwidth is the β), added
	// where it is issued and never hidden.
	StepOverheadS      float64 `json:"step_overhead_s,omitempty"`
	CollectiveLatencyS float64 `json:"collective_latency_s,omitempty"`
	// MemFactors scale the predicted memory categories (the Mem* breakdown keys
	// but overhead): how far the backend's allocations differ from the model's
	// accounting of each.
	MemFactors map[string]float64 `json:"mem_factors,omitempty"`
	// ReservedFactor is reserved / allocated of the caching allocator (GPU).
	ReservedFactor float64 `json:"reserved_factor,omitempty"`
	// OverheadBytes is memory outside the allocator: on a GPU the CUDA context
	// and NCCL, on the cpu profile the runtime beside the training state (RSS −
	// allocations).
	OverheadBytes *int64 `json:"overhead_bytes,omitempty"`
	// Fit says what the constants were fitted to and how well.
	Fit FitReport `json:"fit"`
}

// RefParams is the model size at which Constants.Efficiency applies (1e9).
const RefParams = 1e9

// FitReport is what a calibration was fitted to and how well it predicts.
type FitReport struct {
	// Runs is how many measured runs the constants were fitted to; Backends
	// names the backends that measured them, and Ingested counts the runs
	// that no backend ran (ingested from folders of past runs).
	Runs     int      `json:"runs"`
	Backends []string `json:"backends,omitempty"`
	Ingested int      `json:"ingested,omitempty"`
	// Fitted names the constants fitted; Kept names those the runs cannot tell
	// (kept at the model's value), each with why.
	Fitted []string `json:"fitted,omitempty"`
	Kept   []string `json:"kept,omitempty"`
	// Warnings say when the fit rests on too little: fewer throughput runs than
	// the constants fitted to them.
	Warnings []string `json:"warnings,omitempty"`
	// Range is what the throughput runs spanned (model size, nodes, sequence
	// length): a prediction outside it says it extrapolates.
	Range *FitRange `json:"range,omitempty"`
	// LeaveOneOut has, per run, the error of its prediction by constants fitted
	// to the other runs (or, beyond MaxFolds runs, to the runs outside its fold):
	// the error to expect on a run the fit has not seen.
	LeaveOneOut []LOORow `json:"leave_one_out,omitempty"`
	// Folds is how many refits gave LeaveOneOut: Runs (each run left out alone)
	// up to MaxFolds runs, MaxFolds beyond, each leaving out every MaxFolds-th run.
	Folds int `json:"folds,omitempty"`
}

// LOORow is one run's leave-one-out error: predicted / measured − 1.
type LOORow struct {
	Run     string   `json:"run"`
	Backend string   `json:"backend,omitempty"`
	MemErr  *float64 `json:"mem_err,omitempty"`
	TputErr *float64 `json:"tput_err,omitempty"`
	// TputSpread is how far the run's own repeats disagree on tokens/s
	// (max / min − 1; absent for a single repeat): the machine's noise, which
	// bounds what TputErr can show about the model.
	TputSpread *float64 `json:"tput_repeat_spread,omitempty"`
}

// Bounds of a calibration's constants: outside them a file is refused, since a
// fit that lands there is wrong (or the file was edited by hand).
const (
	minBWFactor          = 0.01
	maxBWFactor          = 10
	maxSizeExponent      = 1
	minMemFactor         = 0.05
	maxMemFactor         = 20
	maxCalReservedFactor = 4
	maxOverheadBytes     = 64 * gib
	maxLOORows           = 100_000
	maxFitRuns           = 1 << 30
	maxStepOverheadS     = 10
	maxLatencyS          = 1
	// maxRankShareExponent: 2 already means two ranks on a host each reach a
	// quarter of its peak (memory bandwidth contention at worst).
	maxRankShareExponent = 2
	// A file's recompute_share: the fit's range (rangesFor) widened to [0, 2]
	// for a hand-written one; 0 makes recompute free, 2 doubles it.
	minRecomputeShare = 0
	maxRecomputeShare = 2
)

// memCategories are the breakdown categories calibration scales (overhead is
// fitted as bytes, not scaled).
var memCategories = []string{MemParams, MemGrads, MemOptimizer, MemActivations, MemLogits, MemBuffers}

// calibrationCache keeps parsed files by path: backend options are parsed per
// run, and a sweep has many runs.
var calibrationCache sync.Map // path -> cachedCalibration

type cachedCalibration struct {
	size, mtime int64
	cal         *Calibration
}

// LoadCalibration reads and checks a calibration file.
func LoadCalibration(path string) (*Calibration, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("calibration %s: %w (write one with `fsdpbench calibrate DIR...`)", path, err)
	}
	if c, ok := calibrationCache.Load(path); ok {
		cc := c.(cachedCalibration)
		if cc.size == st.Size() && cc.mtime == st.ModTime().UnixNano() {
			return cc.cal, nil
		}
	}
	data, err := input.ReadJSON(path, calibrationLimits)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	cal, err := ParseCalibration(data)
	if err != nil {
		return nil, fmt.Errorf("calibration %s: %w; write it again with `fsdpbench calibrate DIR...`", path, err)
	}
	cal.path = path
	calibrationCache.Store(path, cachedCalibration{st.Size(), st.ModTime().UnixNano(), cal})
	return cal, nil
}

// ParseCalibration decodes a calibration file's content and checks every figure
// against its bounds. Unknown keys are errors (a misspelt constant would
// otherwise be ignored silently).
func ParseCalibration(data []byte) (*Calibration, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var c Calibration
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the calibration object")
	}
	if c.Version != CalibrationVersion {
		return nil, fmt.Errorf("version %d, this fsdpbench reads version %d", c.Version, CalibrationVersion)
	}
	if len(c.Profiles) == 0 {
		return nil, fmt.Errorf("no profiles")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Profiles)) {
		hw, backend, two := strings.Cut(name, "/")
		// A key names a profile, never a file: hardware.Lookup would open one.
		if hw == "" || hardware.IsFile(hw) || (two && (backend == "" || strings.Contains(backend, "/"))) {
			return nil, fmt.Errorf("profiles: key %s: give a hardware profile, or PROFILE/BACKEND", input.Quote(name, 64))
		}
		// Constants for no profile would never apply, and a prediction would be
		// labelled with a calibration that changed nothing. A user-defined
		// profile is no built-in one: its constants name its file instead.
		if _, err := hardware.Lookup(hw); err != nil && c.Profiles[name].ProfileFile == "" {
			return nil, fmt.Errorf("profiles: key %s: %s is no hardware profile (profiles are %s; a user-defined profile's constants name its profile_file)",
				input.Quote(name, 64), input.Quote(hw, 64), strings.Join(hardware.Names(), ", "))
		}
		// Likewise constants of a backend that no run can have: a slip of the
		// pen (h100-sxm/torcrun) would leave them unused, and the prediction
		// would take the hardware's other constants without a word.
		if two && !slices.Contains(knownBackends(), backend) {
			return nil, fmt.Errorf("profiles: key %s: %s is no backend (backends: %s, or a plugin on the plugin path); calibrate keys runs by the backend that ran them, ingested runs by their hardware alone",
				input.Quote(name, 64), input.Quote(backend, 64), strings.Join(knownBackends(), ", "))
		}
		if err := c.Profiles[name].check(); err != nil {
			return nil, fmt.Errorf("profiles.%s.%w", input.Clip(name, 64), err)
		}
	}
	return &c, nil
}

// check bounds every constant; the error starts with the constant's key.
func (k Constants) check() error {
	in := func(name string, v, lo, hi float64, zeroOK bool) error {
		if zeroOK && v == 0 {
			return nil
		}
		if !(v >= lo && v <= hi) {
			return fmt.Errorf("%s: %v is outside [%v, %v]", name, v, lo, hi)
		}
		return nil
	}
	errs := []error{
		in("efficiency", k.Efficiency, minEfficiency, 1, false),
		in("efficiency_size_exponent", k.EfficiencySizeExponent, -maxSizeExponent, maxSizeExponent, true),
		in("intra_node_bw_factor", k.IntraNodeBWFactor, minBWFactor, maxBWFactor, true),
		in("inter_node_bw_factor", k.InterNodeBWFactor, minBWFactor, maxBWFactor, true),
		in("reserved_factor", k.ReservedFactor, 1, maxCalReservedFactor, true),
		in("step_overhead_s", k.StepOverheadS, 0, maxStepOverheadS, true),
		in("collective_latency_s", k.CollectiveLatencyS, 0, maxLatencyS, true),
	}
	if k.ForwardOverlap != nil {
		errs = append(errs, in("forward_overlap", *k.ForwardOverlap, 0, 1, false))
	}
	if k.RankShareExponent != nil {
		errs = append(errs, in("rank_share_exponent", *k.RankShareExponent, 0, maxRankShareExponent, false))
	}
	if k.HostWaitShare != nil {
		errs = append(errs, in("host_wait_share", *k.HostWaitShare, 0, 1, false))
	}
	if k.RecomputeShare != nil {
		errs = append(errs, in("recompute_share", *k.RecomputeShare, minRecomputeShare, maxRecomputeShare, false))
	}
	if k.Fit.Range != nil {
		errs = append(errs, k.Fit.Range.check())
	}
	if k.OverheadBytes != nil {
		errs = append(errs, in("overhead_bytes", float64(*k.OverheadBytes), 0, maxOverheadBytes, false))
	}
	for _, cat := range slices.Sorted(maps.Keys(k.MemFactors)) {
		if !slices.Contains(memCategories, cat) {
			errs = append(errs, fmt.Errorf("mem_factors.%s: not a memory category (%s)", input.Clip(cat, 64), strings.Join(memCategories, ", ")))
			continue
		}
		errs = append(errs, in("mem_factors."+cat, k.MemFactors[cat], minMemFactor, maxMemFactor, false))
	}
	if k.Fit.Runs < 0 || k.Fit.Runs > maxFitRuns {
		errs = append(errs, fmt.Errorf("fit.runs: %d is outside [0, %d]", k.Fit.Runs, maxFitRuns))
	}
	if n := len(k.Fit.LeaveOneOut); n > maxLOORows {
		errs = append(errs, fmt.Errorf("fit.leave_one_out: %d rows, at most %d", n, maxLOORows))
	}
	errs = append(errs, looRowsErr(k.Fit.LeaveOneOut))
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Write stores the calibration at path (atomically, as every results file).
func (c *Calibration) Write(path string) error {
	b, err := c.Encode()
	if err != nil {
		return err
	}
	return results.WriteFileAtomic(path, b)
}

// Encode is the calibration file's content, as Write stores it.
func (c *Calibration) Encode() ([]byte, error) {
	c.Version = CalibrationVersion
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Path is the file the calibration was read from ("" when built in memory).
func (c *Calibration) Path() string { return c.path }

// efficiencyFor is the compute efficiency the constants give a model of params
// parameters, at most MaxCalibratedEfficiency: the size exponent extrapolated
// past the fitted sizes must not promise more of peak than any training run
// reaches. Outside the fitted model sizes (Fit.Range) the efficiency stays at
// the nearest fitted size's: a power law measured on 1B–13B keeps growing,
// while GEMMs saturate (llm-foundry's H100 MFU is 0.42–0.46 from 7B to 70B),
// so holding it is the extrapolation that does not promise what was never
// measured (issue 26: 0.77 of peak at 70B from a fit up to 13B).
func (k *Constants) efficiencyFor(params int64) float64 {
	e := k.Efficiency
	if r := k.Fit.Range; r != nil && r.MaxParams > 0 {
		params = min(max(params, r.MinParams), r.MaxParams)
	}
	if k.EfficiencySizeExponent != 0 && params > 0 {
		e *= math.Pow(float64(params)/RefParams, k.EfficiencySizeExponent)
	}
	return min(max(e, minEfficiency), MaxCalibratedEfficiency)
}

// CalibrationUse is what a prediction says of the calibration it used (in
// Prediction.Calibration and metrics.json's extra.calibration).
type CalibrationUse struct {
	File     string `json:"file,omitempty"`
	Hardware string `json:"hardware"`
	// Profile is the calibration's entry used: the hardware, or hardware/backend.
	Profile string `json:"profile"`
	Runs    int    `json:"runs"`
}

// calibrate applies opts.Calibration's constants for p's hardware to p: the
// efficiency and bus bandwidths now (options given explicitly win), memory and
// overlap through p.cal when the model computes them.
func calibrate(p *point, opts Options) {
	if opts.Calibration == nil {
		return
	}
	key, k, ok := opts.Calibration.lookup(p.hw.Name, p.rc.Backend, p.hw.File != "")
	if !ok {
		p.notes = append(p.notes, fmt.Sprintf("uncalibrated: the calibration %s has no constants for hardware %s (it has %s)",
			opts.Calibration.path, p.hw.Name, input.ClipList(slices.Sorted(maps.Keys(opts.Calibration.Profiles)), 0)))
		return
	}
	p.cal = &k
	p.calUse = &CalibrationUse{File: opts.Calibration.path, Hardware: p.hw.Name, Profile: key, Runs: k.Fit.Runs}
	if opts.Efficiency == 0 {
		p.hw.Efficiency = k.efficiencyFor(p.shape.Params())
	}
	if opts.IntraNodeBusBW == 0 && k.IntraNodeBWFactor > 0 {
		p.hw.IntraNodeBusBWBytesPerS *= k.IntraNodeBWFactor
	}
	if opts.InterNodeBusBW == 0 && k.InterNodeBWFactor > 0 {
		p.hw.InterNodeBusBWBytesPerS *= k.InterNodeBWFactor
	}
	where := ""
	if opts.Calibration.path != "" {
		where = " from " + opts.Calibration.path
	}
	p.notes = append(p.notes, fmt.Sprintf("calibrated%s: constants for %s fitted to %d measured runs (efficiency %.3g)",
		where, key, k.Fit.Runs, p.hw.Efficiency))
	if k.ProfileFile != "" && !sameFile(k.ProfileFile, p.hw.File) {
		// The key is the profile's name; the figures the constants scale are
		// the file's, which may have changed since.
		p.notes = append(p.notes, fmt.Sprintf("the constants for %s were fitted to runs on the profile file %s, this prediction's profile is %s: they apply by the profile's name, so keep the files' figures alike",
			key, k.ProfileFile, p.hw.File))
	}
	if r := k.Fit.Range; r != nil {
		if out := r.outside(p.shape.Params(), p.rc.Nodes, p.rc.SeqLen); out != "" {
			p.notes = append(p.notes, ExtrapolatesNote+out+": the constants were fitted inside that range (efficiency's size exponent, bandwidth factors), so expect larger errors here than the fit's leave-one-out")
		}
	}
}

// sameFile says paths a and b name one file: the same absolute path, or one
// file reached by two (a link, a relative path from another folder).
func sameFile(a, b string) bool {
	if aa, err := filepath.Abs(a); err == nil {
		if ab, err := filepath.Abs(b); err == nil && aa == ab {
			return true
		}
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// ExtrapolatesNote begins the note of a calibrated prediction outside the
// range of the runs its constants were fitted to (FitRange); plan and
// recommend print it beside their answer.
const ExtrapolatesNote = "calibration extrapolates: "

// recomputeShare is Constants.RecomputeShare: the calibrated one, else
// gpuRecomputeShare for a PyTorch run on a GPU, else 1 (the recompute costs
// what its FLOPs do).
func (p *point) recomputeShare() float64 {
	if p.cal != nil && p.cal.RecomputeShare != nil {
		return *p.cal.RecomputeShare
	}
	return uncalibratedRecomputeShare(p.hw.IsGPU, p.as.Trainer)
}

// uncalibratedRecomputeShare is the recompute share without a calibration:
// gpuRecomputeShare for a PyTorch run on a GPU, 1 on a CPU and for the Go
// trainer. The fit starts from it and its prior pulls towards it.
func uncalibratedRecomputeShare(gpu bool, trainer string) float64 {
	if gpu && trainer != TrainerGotrain {
		return gpuRecomputeShare
	}
	return 1
}

// gpuRecomputeShare is what a checkpointed PyTorch step's recompute costs on a
// GPU, as a share of a forward, until a calibration fits it: 0.75, read off
// the kept llm-foundry rows (TestPublishedFoundryRowsByGroup), whose
// checkpointed runs reach HFU 0.69–0.79 on A100 and 0.50–0.59 on H100,
// counting a whole forward as recomputed, above the MFU of the runs without
// checkpointing (0.55–0.64, 0.35–0.46): a full forward's cost (1) left every
// checkpointed row under-predicted, by 10% on average over 46 held-out ones
// (TestPublishedFoundryCSVRows). Part of what the share absorbs is not
// recompute: checkpointed runs take larger micro-batches, whose kernels run
// faster. The Go trainer's recompute is measured on its own (1).
const gpuRecomputeShare = 0.75

// lookup finds the constants for a run on hardware hw measured by backend:
// hw/backend's, else hw's, else the only hw/* entry there is. user says hw is a
// user-defined profile (a profile file): only constants fitted on one
// (Constants.ProfileFile) apply to it, and only the others to a built-in
// profile, so that a file named like a built-in profile (h100-sxm.yaml, with
// no name: key) and the built-in profile never take each other's constants.
func (c *Calibration) lookup(hw, backend string, user bool) (string, Constants, bool) {
	get := func(key string) (Constants, bool) {
		k, ok := c.Profiles[key]
		return k, ok && (k.ProfileFile != "") == user
	}
	if backend != "" {
		if k, ok := get(hw + "/" + backend); ok {
			return hw + "/" + backend, k, true
		}
	}
	if k, ok := get(hw); ok {
		return hw, k, true
	}
	var only string
	for key := range c.Profiles {
		if _, ok := get(key); ok && strings.HasPrefix(key, hw+"/") {
			if only != "" {
				return "", Constants{}, false // several backends' and none asked for
			}
			only = key
		}
	}
	if only == "" {
		return "", Constants{}, false
	}
	return only, c.Profiles[only], true
}

// BuiltinBackends are the backends built into fsdpbench, whose names a
// calibration's keys may carry.
var BuiltinBackends = []string{Name, TrainerGotrain, "torchrun"}

// PluginBackends, when set, lists the plugin backends found on this machine:
// their names are keys' backend halves too. The CLI sets it (the plugins on
// the plugin path); unset, only BuiltinBackends' names are read.
var PluginBackends func() []string

// knownBackends are the backend names a calibration key may carry, sorted.
func knownBackends() []string {
	names := slices.Clone(BuiltinBackends)
	if PluginBackends != nil {
		names = append(names, PluginBackends()...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// calibratedLinks are p's busbw curves (fabric profiles, nccl-tests output)
// scaled by the calibrated bandwidth factors, as the flat figures are.
func (p *point) calibratedLinks() Links {
	if p.cal == nil {
		return p.links
	}
	scale := func(l Link, f float64) Link {
		if f == 0 || len(l) == 0 {
			return l
		}
		out := make(Link, len(l))
		for coll, c := range l {
			cc := make(Curve, len(c))
			for i, pt := range c {
				pt.BusBW *= f
				cc[i] = pt
			}
			out[coll] = cc
		}
		return out
	}
	return Links{Intra: scale(p.links.Intra, p.cal.IntraNodeBWFactor), Inter: scale(p.links.Inter, p.cal.InterNodeBWFactor)}
}

// forwardOverlap is the share of forward all-gathers hidden without
// forward_prefetch: the calibrated one, or def.
func (p *point) forwardOverlap(def float64) float64 {
	if p.cal != nil && p.cal.ForwardOverlap != nil {
		return *p.cal.ForwardOverlap
	}
	return def
}

// rankShareExponent is how a host profile's peak divides among the ranks on
// it (Constants.RankShareExponent): the calibrated exponent, or 1.
func (p *point) rankShareExponent() float64 {
	if p.cal != nil && p.cal.RankShareExponent != nil {
		return *p.cal.RankShareExponent
	}
	return 1
}

// calibrateMemory scales mem's categories by the calibrated factors and puts
// the calibrated overhead in; it returns the calibrated reserved/allocated
// factor, 0 when there is none.
func (p *point) calibrateMemory(mem map[string]int64) float64 {
	if p.cal == nil {
		return 0
	}
	for cat, f := range p.cal.MemFactors {
		if v, ok := mem[cat]; ok {
			mem[cat] = ceilBytes(float64(v) * f)
		}
	}
	if p.cal.OverheadBytes != nil {
		// On a GPU the CUDA context and NCCL; on the cpu profile the runtime
		// (Python and torch, or Go) beside the training state.
		mem[MemOverhead] = *p.cal.OverheadBytes
	}
	if !p.hw.IsGPU {
		return 0 // host memory: no caching allocator
	}
	return p.cal.ReservedFactor
}

// PredictCalibrated is PredictWith with a calibration: cal's constants for the
// run's hardware (and backend) apply; nil: none, or the calibration option's.
func PredictCalibrated(rc sweeps.RunConfig, simOptions map[string]any, cal *Calibration) (Prediction, error) {
	opts, err := predictOptions(rc, simOptions)
	if err != nil {
		return Prediction{}, err
	}
	if cal != nil {
		opts.Calibration = cal
	}
	return predict(rc, opts)
}

// calibrateTime adds the calibrated fixed costs to the predicted step: the
// per-micro-step overhead, and the latency of every collective call, and
// derives throughput and MFU again. The overhead is what the micro-step's ops
// cost beyond their FLOPs (launches, dispatch, the framework's Python), so
// activation checkpointing's recompute, which runs forward ops again, repeats
// it in the FLOPs' proportion (recomputeFactor).
func (p *point) calibrateTime(strategy string, wu wrapUnits, pred *Prediction) {
	p.hostWait(pred)
	if p.cal == nil || (p.cal.StepOverheadS == 0 && p.cal.CollectiveLatencyS == 0) {
		return
	}
	ga := float64(p.rc.GradAccum)
	lat := float64(collectiveCalls(p, strategy, wu)) * p.cal.CollectiveLatencyS
	pred.ExposedCommS += lat
	pred.CommS += lat
	pred.StepTimeS += ga*p.cal.StepOverheadS*p.recomputeFactor() + lat
	pred.TokensPerS = float64(pred.TokensPerStep) / pred.StepTimeS
	pred.MFU = pred.ModelFlopsPerToken * pred.TokensPerS / float64(p.rc.WorldSize) / pred.PeakFlopsPerS
}

// hostWait moves the calibrated share of what sharing the host costs a rank
// (Constants.HostWaitShare) from compute to waiting inside its collectives:
// exposed communication, the kinds in proportion to their times. The step
// stays as it was.
func (p *point) hostWait(pred *Prediction) {
	if p.cal == nil || p.cal.HostWaitShare == nil || p.hw.IsGPU || pred.CommS <= 0 {
		return
	}
	n := float64(p.rc.GPUsPerNode)
	if n <= 1 {
		return
	}
	w := *p.cal.HostWaitShare * pred.ComputeS * (1 - math.Pow(n, -p.rankShareExponent()))
	if !(w > 0) {
		return
	}
	scale := 1 + w/pred.CommS
	pred.allGatherS, pred.reduceScatterS, pred.allReduceS = pred.allGatherS*scale, pred.reduceScatterS*scale, pred.allReduceS*scale
	pred.ComputeS -= w
	pred.CommS += w
	pred.ExposedCommS += w
}

// collectiveCalls is how many collectives one rank issues per optimizer step:
// per micro-step an all-gather per unit in forward and again in backward
// (full_shard; the root stays gathered) or once (shard_grad_op); on the last
// micro-step a reduce-scatter per unit, or an all-reduce per unit (no_shard,
// and hybrid_shard's replication) or per 25 MiB bucket (DDP).
func collectiveCalls(p *point, strategy string, wu wrapUnits) int64 {
	r := p.rc
	if r.WorldSize <= 1 {
		return 0
	}
	ga := int64(r.GradAccum)
	units := int64(len(wu.Units)) + 1 // and the root
	switch strategy {
	case sweeps.FullShard:
		return ga*(2*units-1) + units
	case sweeps.HybridShard:
		return ga*(2*units-1) + 2*units
	case sweeps.ShardGradOp:
		return ga*units + units
	case sweeps.NoShard:
		return units
	case sweeps.DDP:
		return ddpCalls(p, units)
	}
	return 0
}

// ddpCalls is how many all-reduces DDP issues per step: one per 25 MiB bucket
// in PyTorch, one per wrap unit in the Go trainer (its unit is the bucket).
func ddpCalls(p *point, units int64) int64 {
	if p.as.Trainer == TrainerGotrain {
		return units
	}
	return (p.shape.Params()*4 + ddpBucketBytes - 1) / ddpBucketBytes
}

// looRowsErr checks a fit's leave-one-out rows: predicted / measured − 1 is at
// least −1, a spread max / min − 1 at least 0 (JSON has no NaN or infinity).
func looRowsErr(rows []LOORow) error {
	for i, r := range rows {
		for _, v := range []struct {
			name string
			p    *float64
			min  float64
		}{{"mem_err", r.MemErr, -1}, {"tput_err", r.TputErr, -1}, {"tput_repeat_spread", r.TputSpread, 0}} {
			if v.p != nil && !(*v.p >= v.min) {
				return fmt.Errorf("fit.leave_one_out[%d].%s: %g is below %g", i, v.name, *v.p, v.min)
			}
		}
	}
	return nil
}

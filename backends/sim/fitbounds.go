package sim

import (
	"fmt"
	"math"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// fitRange is the physically plausible range of one fitted constant: the fit
// moves the constant only inside it, so that a constant the runs push against
// a bound stops there instead of absorbing an error that belongs elsewhere (a
// size exponent that extrapolates efficiency past peak, an NVLink factor that
// explains exposed communication as a slow link).
type fitRange struct{ lo, hi float64 }

// clamp puts v inside the range.
func (r fitRange) clamp(v float64) float64 { return min(max(v, r.lo), r.hi) }

// bounded maps an unbounded coordinate onto the open range smoothly (lo + (hi −
// lo)·sigmoid(x)): the minimiser searches the whole line, and the constant
// never leaves its range or sits on a flat clamp the simplex cannot leave.
func (r fitRange) bounded(x float64) float64 {
	return r.lo + (r.hi-r.lo)/(1+math.Exp(-x))
}

// unbounded is bounded's inverse, for a start value (a default, an earlier
// fit); a value on or past a bound starts just inside it.
func (r fitRange) unbounded(v float64) float64 {
	u := (v - r.lo) / (r.hi - r.lo)
	u = min(max(u, 1e-6), 1-1e-6)
	return math.Log(u / (1 - u))
}

func (r fitRange) String() string { return fmt.Sprintf("[%.3g, %.3g]", r.lo, r.hi) }

// MaxCalibratedEfficiency caps the compute efficiency a calibration gives any
// model size (Constants.efficiencyFor): the best published dense-transformer
// training runs reach 0.55–0.64 of peak bf16 (llm-foundry's A100 tables, MFU
// up to 0.64; HFU with recompute up to 0.79 counts recomputed FLOPs), and a
// fitted size exponent extrapolated to a model ten times the largest measured
// would otherwise pass it (issue 26: 0.77 of peak at 70B from a fit up to 13B).
const MaxCalibratedEfficiency = 0.75

// plausibleRanges are the ranges the fit keeps each constant in, on a GPU or
// on a host profile (cpu), and why each is where it is:
//
//   - efficiency (at RefParams): [0.01, 0.75]. The cap is
//     MaxCalibratedEfficiency; below 0.01 of peak a device is idle, not
//     computing, and the time is something the model does not hold (a
//     host-bound input pipeline), which an efficiency would carry into every
//     prediction. On the cpu profile the floor is the option's (0.001): a Go
//     GEMM on one core is far from the nominal AVX2 peak.
//   - efficiency_size_exponent: [−0.1, 0.1]. Over the 100× of model sizes
//     published tables span (0.76B to 70B) it moves efficiency by at most
//     100^0.1 = 1.58×, the most any published FSDP table shows (llm-foundry's
//     A100 80GB MFU 0.45 at 125M to 0.64 at 7B); the fit that reached 0.16
//     predicted 0.77 of peak at 70B.
//   - intra_node_bw_factor: GPU [0.4, 1.25] of the profile's NVLink figure
//     (per-direction link bandwidth): nccl-tests' busbw reaches 0.8–1.07 of it
//     on large messages (H100 ≈ 370–480 GB/s of 450), and FSDP's per-unit
//     messages (tens to hundreds of MB) still above 0.5; a fit at 0.19 (≈ 87
//     GB/s) is exposed communication the overlap model misses, not NVLink. The
//     cpu profile's loopback figure is a guess: [0.05, 10].
//   - inter_node_bw_factor: [0.5, 1.25] where every run that spans nodes states
//     its links (a fabric profile, nccl-tests output, a bus bandwidth): those
//     are measured busbw curves, reached as NVLink's are. Over the profile's
//     default (25 GB/s, a cluster nothing is known about) [0.05, 16]: from TCP
//     over 10 GbE (1.25 GB/s) to 8 × 400 Gb/s rails (≈ 400 GB/s).
//   - recompute_share: [0.5, 1.25] of the recompute the model counts (the
//     forward run again: a third of the FLOPs under full checkpointing). The
//     recomputed forward runs the same kernels: it cannot be free, and at most
//     it reaches the capped efficiency where the step averages half of it
//     (0.5); its non-matmul ops and launches cost at most a quarter more (1.25).
//   - step_overhead_s: GPU [0, 0.1] s per micro-step: kernel launches (≈ 1,000
//     at 5–10 µs) and the framework's Python are milliseconds; a tenth of a
//     second is a stall, not overhead. cpu: [0, 1] s (the Go scheduler, the
//     Python interpreter on a loaded host).
//   - collective_latency_s: GPU [0, 1] ms per call: NCCL's small-message time
//     is 10–50 µs inside a node and hundreds across nodes. cpu (gloo or TCP
//     loopback): [0, 50] ms.
//   - mem_factors: [0.1, 10] per category: each category is a formula of the
//     run's stated stack; one off by more than 10× is another assumption (the
//     loss, attention, checkpointing), which the run's backend_options state,
//     not a factor.
//   - reserved_factor: [1, 2], as the option: reserved below allocated cannot
//     be, above twice it is a leak.
//   - overhead_bytes: GPU [0, 8] GiB (CUDA context ≈ 0.4 GiB, an NCCL
//     communicator 0.7–1.2 GiB, a few communicators); cpu [0, 16] GiB (the
//     Python and torch runtime's RSS beside the training state).
//
// forward_overlap ([0, 1]) and rank_share_exponent ([0, 2]) keep their
// natural ranges (a share; the cpu's contention, see maxRankShareExponent).
type plausibleRanges struct {
	efficiency, sizeExponent, intraBW, interBW, recompute fitRange
	stepOverheadS, latencyS, memFactor, reserved          fitRange
	overheadBytes                                         float64
}

func rangesFor(gpu, interStated bool) plausibleRanges {
	r := plausibleRanges{
		efficiency:    fitRange{0.01, MaxCalibratedEfficiency},
		sizeExponent:  fitRange{-0.1, 0.1},
		intraBW:       fitRange{0.4, 1.25},
		interBW:       fitRange{0.05, 16},
		recompute:     fitRange{0.5, 1.25},
		stepOverheadS: fitRange{0, 0.1},
		latencyS:      fitRange{0, 1e-3},
		memFactor:     fitRange{0.1, 10},
		reserved:      fitRange{1, maxReservedFactor},
		overheadBytes: 8 * gib,
	}
	if interStated {
		r.interBW = fitRange{0.5, 1.25}
	}
	if !gpu {
		r.efficiency.lo = minEfficiency
		r.intraBW = fitRange{0.05, 10}
		r.stepOverheadS = fitRange{0, 1}
		r.latencyS = fitRange{0, 50e-3}
		r.overheadBytes = 16 * gib
	}
	return r
}

// FitRange is what a calibration's throughput runs spanned: a prediction
// outside it extrapolates the fitted constants (a size exponent measured on
// 1B–13B applied to 70B, bandwidth factors measured inside a node applied
// across nodes), and its notes say so.
type FitRange struct {
	MinParams int64 `json:"min_params"`
	MaxParams int64 `json:"max_params"`
	MinNodes  int   `json:"min_nodes"`
	MaxNodes  int   `json:"max_nodes"`
	MinSeqLen int   `json:"min_seq_len"`
	MaxSeqLen int   `json:"max_seq_len"`
}

// paramsSlack is how far past the fitted model sizes a prediction is still
// inside: MPT's learned positions make one model's count move by ~1% with its
// sequence length.
const paramsSlack = 0.05

// fitRangeOf is the range the samples span.
func fitRangeOf(g []sample) *FitRange {
	if len(g) == 0 {
		return nil
	}
	r := &FitRange{MinParams: math.MaxInt64, MinNodes: math.MaxInt, MinSeqLen: math.MaxInt}
	for _, s := range g {
		n := max(s.m.Config.Nodes, 1)
		r.MinParams, r.MaxParams = min(r.MinParams, s.P), max(r.MaxParams, s.P)
		r.MinNodes, r.MaxNodes = min(r.MinNodes, n), max(r.MaxNodes, n)
		r.MinSeqLen, r.MaxSeqLen = min(r.MinSeqLen, s.m.Config.SeqLen), max(r.MaxSeqLen, s.m.Config.SeqLen)
	}
	return r
}

// check bounds the range's figures (a calibration file is input).
func (r *FitRange) check() error {
	switch {
	case r.MinParams < 0 || r.MaxParams < r.MinParams || r.MaxParams > maxFitParams:
		return fmt.Errorf("fit.range: params %d to %d is outside [0, %d] or reversed", r.MinParams, r.MaxParams, int64(maxFitParams))
	case r.MinNodes < 1 || r.MaxNodes < r.MinNodes || r.MaxNodes > sweeps.MaxNodes:
		return fmt.Errorf("fit.range: nodes %d to %d is outside [1, %d] or reversed", r.MinNodes, r.MaxNodes, sweeps.MaxNodes)
	case r.MinSeqLen < 1 || r.MaxSeqLen < r.MinSeqLen || r.MaxSeqLen > sweeps.MaxSeqLen:
		return fmt.Errorf("fit.range: seq_len %d to %d is outside [1, %d] or reversed", r.MinSeqLen, r.MaxSeqLen, sweeps.MaxSeqLen)
	}
	return nil
}

// maxFitParams bounds a range's model size: 10^15 parameters is no model.
const maxFitParams = 1e15

// outside says where p lies outside the range, "" inside.
func (r *FitRange) outside(params int64, nodes, seq int) string {
	var out []string
	if float64(params) < float64(r.MinParams)*(1-paramsSlack) || float64(params) > float64(r.MaxParams)*(1+paramsSlack) {
		out = append(out, fmt.Sprintf("%s params (fitted %s–%s)", humanParams(params), humanParams(r.MinParams), humanParams(r.MaxParams)))
	}
	if nodes < r.MinNodes || nodes > r.MaxNodes {
		out = append(out, fmt.Sprintf("%d nodes (fitted %s)", nodes, span(r.MinNodes, r.MaxNodes)))
	}
	if seq < r.MinSeqLen || seq > r.MaxSeqLen {
		out = append(out, fmt.Sprintf("seq_len %d (fitted %s)", seq, span(r.MinSeqLen, r.MaxSeqLen)))
	}
	return strings.Join(out, ", ")
}

func span(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// humanParams writes a parameter count as 760M, 13B.
func humanParams(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3gB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.3gM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

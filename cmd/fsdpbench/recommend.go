package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/goccy/go-yaml"
	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Bounds of recommend's flags.
const (
	maxTop       = 1000
	maxMeasure   = 64
	maxBudgetGiB = 1 << 20
)

type recommendFlags struct {
	model, hardware, precision string
	nodes, gpusPerNode         int
	seqLen, globalBatch        int
	budgetGiB                  float64
	top                        int
	all                        bool
	calibration                string
	simOptions                 []string

	measure           int
	backend, launcher string
	steps, warmup     int
	resultsDir, name  string
	sets              []string
	progress          string
	table             tableFlags
	width             int // the tables' width, from table (0: whole)
}

func newRecommendCmd() *cobra.Command {
	var f recommendFlags
	cmd := &cobra.Command{
		Use:   "recommend --model M --hardware HW --nodes N --gpus-per-node G --global-batch B [--budget-gib X]",
		Short: "Rank training configurations for a model on a cluster by predicted tokens/s within a memory budget",
		Long: `recommend answers "which configuration for model M on N × GPU with at most B GiB per GPU
and global batch G?". It enumerates sharding (full_shard, shard_grad_op, no_shard, ddp,
and hybrid_shard on several nodes, its shard group being one node) × micro-batch ×
grad_accum (their product per GPU fixed by the global batch) × activation
checkpointing × backward and forward prefetch × CPU offload, predicts every point
with the analytic model (calibrated when a calibration is given, or found in
<results>/calibration.json), ranks the points within the budget by tokens/s, prints
the top ones with their predicted memory, and says why the others lost (over
budget, does not fit, refused, or slower and what costs them: comm-bound,
compute-bound, copy-bound (FSDP's own copies), offload-bound, fixed costs).

--measure K runs the top K with a real backend (--backend gotrain, torchrun or a
plugin; --launcher local or slurm) as a sweep named --name under --results, each
run keeping its prediction beside its measurement, then prints predicted against
measured and the command that feeds the measurements to calibrate. With --measure
only the points the backend accepts are ranked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRecommend(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model preset or path to a Hugging Face config.json (required)")
	fl.StringVar(&f.hardware, "hardware", "", "hardware profile: "+strings.Join(hardware.Names(), ", ")+", or the path of a profile file (.yaml, see examples/hardware/my-gpu.yaml) (required)")
	fl.IntVar(&f.nodes, "nodes", 1, "nodes")
	fl.IntVar(&f.gpusPerNode, "gpus-per-node", 8, "GPUs (ranks) per node")
	fl.IntVar(&f.seqLen, "seq-len", 2048, "sequence length in tokens")
	fl.IntVar(&f.globalBatch, "global-batch", 0, "samples per optimizer step over all GPUs (required; a multiple of the GPUs)")
	fl.Float64Var(&f.budgetGiB, "budget-gib", 0, "most memory per GPU a configuration may take, GiB as nvidia-smi shows it (0: the whole device)")
	fl.StringVar(&f.precision, "precision", sweeps.BF16, "mixed precision: "+strings.Join(sweeps.MixedPrecisionValues, ", "))
	fl.IntVar(&f.top, "top", 10, fmt.Sprintf("how many configurations to list, 1 to %d", maxTop))
	fl.BoolVar(&f.all, "all", false, "also list every other configuration with why it lost")
	fl.StringVar(&f.calibration, "calibration", "", "calibration `FILE` written by fsdpbench calibrate (default <results>/"+sim.CalibrationFile+" when it exists; none: uncalibrated)")
	fl.StringArrayVar(&f.simOptions, "option", nil, "a sim backend option, key=value (repeatable), e.g. inter_node_bus_bw_gbps=3 for nodes joined by TCP")
	fl.IntVar(&f.measure, "measure", 0, fmt.Sprintf("run the top K (at most %d) with --backend and print predicted vs measured", maxMeasure))
	fl.StringVar(&f.backend, "backend", "gotrain", "backend that measures (--measure)")
	fl.StringVar(&f.launcher, "launcher", "local", "launcher of the measured runs: local or slurm")
	fl.IntVar(&f.steps, "steps", 10, "measured steps per run (--measure)")
	fl.IntVar(&f.warmup, "warmup-steps", 2, "unmeasured warm-up steps per run (--measure)")
	fl.StringVar(&f.resultsDir, "results", harness.DefaultResultsDir, "results directory (measured runs; default calibration)")
	fl.StringVar(&f.name, "name", "", "sweep name of the measured runs (default recommend-<model>)")
	fl.StringArrayVar(&f.sets, "set", nil, "override the measuring sweep's spec, key=value (e.g. launcher_options.partition=gpu); repeatable")
	fl.StringVar(&f.progress, "progress", "plain", "progress of --measure: bars, plain, none")
	f.table.add(cmd)
	return cmd
}

func runRecommend(cmd *cobra.Command, f *recommendFlags) error {
	switch {
	case f.model == "" || f.hardware == "" || f.globalBatch == 0:
		return usageError(errors.New("give --model, --hardware and --global-batch, e.g. --model llama3-8b --hardware h100-sxm --gpus-per-node 8 --global-batch 64"))
	case f.top < 1 || f.top > maxTop:
		return usageError(fmt.Errorf("--top %d: give 1 to %d", f.top, maxTop))
	case f.measure < 0 || f.measure > maxMeasure:
		return usageError(fmt.Errorf("--measure %d: give 0 to %d runs", f.measure, maxMeasure))
	case !(f.budgetGiB >= 0 && f.budgetGiB <= maxBudgetGiB):
		return usageError(fmt.Errorf("--budget-gib %v: give 0 (the whole device) to %d", f.budgetGiB, maxBudgetGiB))
	case !slices.Contains([]string{string(harness.ProgressBars), string(harness.ProgressPlain), string(harness.ProgressNone)}, f.progress):
		return usageError(fmt.Errorf("--progress %q: use bars, plain or none", f.progress))
	case !slices.Contains(sweeps.MixedPrecisionValues, f.precision):
		return usageError(fmt.Errorf("--precision %q: use one of %s", f.precision, strings.Join(sweeps.MixedPrecisionValues, ", ")))
	case f.steps < 1 || f.steps > sweeps.MaxSteps || f.warmup < 0 || f.warmup > sweeps.MaxSteps:
		return usageError(fmt.Errorf("--steps %d / --warmup-steps %d: give 1 to %d measured and 0 to %d warm-up steps", f.steps, f.warmup, sweeps.MaxSteps, sweeps.MaxSteps))
	}
	if err := shapes.Check(f.model); err != nil {
		return usageError(fmt.Errorf("--model: %w", err))
	}
	if _, err := hardware.Lookup(f.hardware); err != nil {
		return usageError(fmt.Errorf("--hardware: %w", err))
	}
	simOpts, err := parseSimOptions(f.simOptions)
	if err != nil {
		return usageError(err)
	}
	cal, err := recommendCalibration(cmd.ErrOrStderr(), f)
	if err != nil {
		return usageError(err)
	}
	req := sim.Request{Model: f.model, Hardware: f.hardware, Nodes: f.nodes, GPUsPerNode: f.gpusPerNode,
		SeqLen: f.seqLen, GlobalBatch: f.globalBatch, BudgetBytes: int64(f.budgetGiB * gib),
		MixedPrecision: f.precision, BackendOptions: simOpts, Calibration: cal}
	if f.measure > 0 {
		reg, err := newRegistry()
		if err != nil {
			return failure(err)
		}
		be, err := reg.Get(f.backend)
		if err != nil {
			return usageError(fmt.Errorf("--backend: %w", err))
		}
		req.Backend = f.backend
		req.Accept = func(rc sweeps.RunConfig) error {
			rc.Backend, rc.BackendOptions, rc.Launcher = f.backend, nil, f.launcher
			rc.Steps, rc.WarmupSteps, rc.Repeats = f.steps, f.warmup, 1
			return be.Validate(cmd.Context(), rc)
		}
	}
	cands, err := sim.Recommend(req)
	if err != nil {
		return usageError(err)
	}
	w := cmd.OutOrStdout()
	if f.width, err = f.table.resolve(w); err != nil {
		return err
	}
	top, err := printRecommendation(w, f, req, cands)
	if err != nil {
		return failure(err)
	}
	if f.measure == 0 || len(top) == 0 {
		return nil
	}
	return measureTop(cmd, f, cal, simOpts, top[:min(f.measure, len(top))])
}

// parseSimOptions reads --option key=value pairs as the sim's backend options
// (numbers and booleans as such) and checks them.
func parseSimOptions(kvs []string) (map[string]any, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--option %q: give key=value, e.g. inter_node_bus_bw_gbps=3", kv)
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = x
		} else if b, err := strconv.ParseBool(v); err == nil {
			m[k] = b
		} else {
			m[k] = v
		}
	}
	if _, err := sim.ParseOptions(m); err != nil {
		return nil, fmt.Errorf("--option: %w", err)
	}
	return m, nil
}

// recommendCalibration is --calibration, or <results>/calibration.json when it
// exists (said on w), or none.
func recommendCalibration(w io.Writer, f *recommendFlags) (*sim.Calibration, error) {
	switch f.calibration {
	case "none":
		return nil, nil
	case "":
		def := filepath.Join(f.resultsDir, sim.CalibrationFile)
		lst, err := os.Lstat(def)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		// Anything else there (a link that leads nowhere or loops, a file that
		// cannot be read) is an error, not a quiet "uncalibrated": the user put
		// it there to be used.
		if err == nil {
			_, err = os.Stat(def)
		}
		if err != nil {
			if lst != nil && lst.Mode()&fs.ModeSymlink != 0 {
				dest, _ := os.Readlink(def)
				why := "leads to nothing"
				if errors.Is(err, syscall.ELOOP) {
					why = "loops"
				}
				err = fmt.Errorf("is a symbolic link that %s (-> %s)", why, dest)
			}
			return nil, fmt.Errorf("calibration %s: %w; fix it, or give --calibration none to predict uncalibrated", def, err)
		}
		fmt.Fprintf(w, "recommend: using the calibration %s (--calibration none to predict uncalibrated)\n", def)
		return loadCalibration(def)
	}
	return loadCalibration(f.calibration)
}

// describe is a candidate's configuration in a few words.
func describe(rc sweeps.RunConfig) string {
	parts := []string{rc.Sharding, fmt.Sprintf("bs %d × ga %d", rc.BatchPerDevice, rc.GradAccum)}
	if rc.ActivationCheckpointing {
		parts = append(parts, "AC")
	}
	if rc.BackwardPrefetch != sweeps.BackwardPre && rc.Sharding != sweeps.DDP && rc.Sharding != sweeps.NoShard {
		parts = append(parts, "bwd "+rc.BackwardPrefetch)
	}
	if rc.ForwardPrefetch {
		parts = append(parts, "fwd prefetch")
	}
	if rc.CPUOffload {
		parts = append(parts, "offload")
	}
	return strings.Join(parts, ", ")
}

// printRecommendation prints the top candidates and why the others lost; it
// returns the ranked candidates.
func printRecommendation(w io.Writer, f *recommendFlags, req sim.Request, cands []sim.Candidate) ([]sim.Candidate, error) {
	var ranked []sim.Candidate
	for _, c := range cands {
		if c.Rank > 0 {
			ranked = append(ranked, c)
		}
	}
	ws := f.nodes * f.gpusPerNode
	budget := "the whole device"
	if req.BudgetBytes > 0 {
		budget = fmt.Sprintf("%.4g GiB", f.budgetGiB)
	}
	calib := "uncalibrated"
	if req.Calibration != nil {
		var cu calibrationUse
		for _, c := range cands {
			if c.Pred != nil {
				cu.add(c.Config, *c.Pred)
			}
		}
		calib = cu.say(req.Calibration)
	}
	printWrapped(w, fmt.Sprintf("%s on %d × %d %s, global batch %d × %d tokens, budget %s per GPU (%s): %d configurations, %d within budget",
		f.model, f.nodes, f.gpusPerNode, f.hardware, f.globalBatch, f.seqLen, budget, calib, len(cands), len(ranked)), f.width)
	if len(ranked) == 0 {
		printWrapped(w, "no configuration fits: more GPUs, a larger budget or a smaller sequence length", f.width)
	} else {
		var rows [][]string
		shown := ranked[:min(f.top, len(ranked))]
		mems, unit := byteCells(peaksOf(shown))
		for i, c := range shown {
			p := c.Pred
			rows = append(rows, []string{strconv.Itoa(c.Rank), describe(c.Config),
				mems[i], fmt.Sprintf("%.3g", p.StepTimeS),
				fmt.Sprintf("%.0f", p.TokensPerS), fmt.Sprintf("%.0f", p.TokensPerS/float64(ws)),
				fmt.Sprintf("%.1f", 100*p.MFU), fmt.Sprintf("%.0f", 100*p.ExposedCommS/p.StepTimeS)})
		}
		// Cut to the terminal: the totals and the finer figures go before the
		// per-GPU rate and the configuration.
		fit := results.TableFit{Width: f.width, Short: map[string]string{"tokens/s/GPU": "tok/s/GPU", "exposed comm %": "comm %"},
			Drop: []string{"tokens/s", "exposed comm %", "step s", "MFU %"}}
		if err := writeTableFit(w, []string{"#", "configuration", "peak " + unit, "step s", "tokens/s", "tokens/s/GPU", "MFU %", "exposed comm %"}, rows, fit); err != nil {
			return nil, err
		}
		ties := 1
		for ties < len(ranked) && strings.HasPrefix(ranked[ties].Lost, sim.LostTie) {
			ties++
		}
		if ties > 1 {
			printWrapped(w, fmt.Sprintf("#1–#%d are ties: %s", ties, sim.TieRule), f.width)
		}
		// #1 within 10% of the device: which assumption would push it over.
		if v := ranked[0].Pred.Verdict; v != "" {
			printWrapped(w, "#1 is near the memory limit: "+v, f.width)
		}
		// A calibration applied outside what it was fitted on: say so.
		for _, n := range ranked[0].Pred.Notes {
			if strings.HasPrefix(n, sim.ExtrapolatesNote) {
				printWrapped(w, "#1 is predicted by a "+n, f.width)
			}
		}
	}
	// A multi-node answer turns on the bandwidth between nodes: say which.
	if f.nodes > 1 {
		for _, c := range cands {
			if c.Pred == nil {
				continue
			}
			for _, n := range c.Pred.Notes {
				if strings.HasPrefix(n, "inter-node:") {
					printWrapped(w, "predicted assuming "+n, f.width)
				}
			}
			break
		}
	}
	// Why the others lost: per reason, how many and the best of them.
	type group struct {
		n    int
		best sim.Candidate
	}
	groups := map[string]*group{}
	var order []string
	for _, c := range cands {
		if c.Lost == "" || (c.Rank > 0 && c.Rank <= f.top) {
			continue
		}
		key := lostKind(c.Lost)
		g, ok := groups[key]
		if !ok {
			g = &group{best: c}
			groups[key] = g
			order = append(order, key)
		}
		g.n++
	}
	if len(order) > 0 {
		fmt.Fprintln(w, "\nwhy the others lost (each reason with its best configuration):")
		var rows [][]string
		bests := make([]sim.Candidate, len(order))
		for i, k := range order {
			bests[i] = groups[k].best
		}
		mems, unit := byteCells(peaksOf(bests))
		for i, k := range order {
			g := groups[k]
			tps := "-"
			if p := g.best.Pred; p != nil {
				tps = fmt.Sprintf("%.0f", p.TokensPerS)
			}
			rows = append(rows, []string{k, strconv.Itoa(g.n), describe(g.best.Config), mems[i], tps, clipText(g.best.Lost, 110)})
		}
		fit := results.TableFit{Width: f.width, Short: map[string]string{"configurations": "n"}, Drop: []string{"tokens/s"}}
		if err := writeTableFit(w, []string{"reason", "configurations", "best of them", "peak " + unit, "tokens/s", "why"}, rows, fit); err != nil {
			return nil, err
		}
		// A point that does not fit because of one assumption (the loss, the
		// attention kernel, ...) would win if the trainer does otherwise: say
		// so for the fastest of them, in full (the "why" column is clipped).
		for _, c := range cands {
			if strings.HasPrefix(c.Lost, sim.LostNoFit) && c.Pred != nil && c.Pred.Verdict != "" {
				printWrapped(w, fmt.Sprintf("%s, but one assumption decides it (the fastest such, %s, %.0f tokens/s): %s",
					sim.LostNoFit, describe(c.Config), c.Pred.TokensPerS, c.Pred.Verdict), f.width)
				break
			}
		}
	}
	if f.all {
		fmt.Fprintln(w)
		var rows [][]string
		mems, unit := byteCells(peaksOf(cands))
		for i, c := range cands {
			tps := "-"
			if p := c.Pred; p != nil {
				tps = fmt.Sprintf("%.0f", p.TokensPerS)
			}
			rank := "-"
			if c.Rank > 0 {
				rank = strconv.Itoa(c.Rank)
			}
			rows = append(rows, []string{rank, describe(c.Config), mems[i], tps, c.Lost})
		}
		if err := writeTableFit(w, []string{"#", "configuration", "peak " + unit, "tokens/s", "lost"}, rows, results.TableFit{Width: f.width}); err != nil {
			return nil, err
		}
	}
	return ranked, nil
}

// peaksOf is the predicted peak device memory of each candidate, nil where there
// is no prediction.
func peaksOf(cands []sim.Candidate) []*int64 {
	out := make([]*int64, len(cands))
	for i := range cands {
		if p := cands[i].Pred; p != nil {
			out[i] = &p.PeakDeviceMemBytes
		}
	}
	return out
}

// lostKind is the reason's class: its first words up to the colon, with the
// slower ones' cause kept and their percentage dropped.
func lostKind(lost string) string {
	if rest, ok := strings.CutPrefix(lost, sim.LostSlower+" by "); ok {
		if _, cause, ok := strings.Cut(rest, ": "); ok {
			if strings.HasPrefix(cause, "as fast") {
				return "as fast (within 1%)"
			}
			if i := strings.Index(cause, " ("); i > 0 {
				cause = cause[:i]
			}
			return sim.LostSlower + ": " + cause
		}
	}
	kind, _, _ := strings.Cut(lost, ":")
	return kind
}

func clipText(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// measureSpec is the sweep spec of the measured runs: one include entry per
// configuration, on the recommendation's model, hardware and cluster.
type measureSpec struct {
	Name        string           `yaml:"name"`
	Backend     string           `yaml:"backend"`
	Launcher    string           `yaml:"launcher"`
	Hardware    string           `yaml:"hardware"`
	Model       string           `yaml:"model"`
	SeqLen      int              `yaml:"seq_len"`
	Steps       int              `yaml:"steps"`
	WarmupSteps int              `yaml:"warmup_steps"`
	Base        map[string]any   `yaml:"base"`
	Include     []map[string]any `yaml:"include"`
}

// measureTop runs the top configurations with the measuring backend through
// the sweep engine, each run keeping its prediction, and prints predicted vs
// measured and how to calibrate with the measurements.
func measureTop(cmd *cobra.Command, f *recommendFlags, cal *sim.Calibration, simOpts map[string]any, top []sim.Candidate) error {
	name := f.name
	if name == "" {
		name = "recommend-" + strings.NewReplacer("/", "-", ".", "-").Replace(filepath.Base(f.model))
	}
	spec := measureSpec{Name: name, Backend: f.backend, Launcher: f.launcher, Hardware: f.hardware, Model: f.model,
		SeqLen: f.seqLen, Steps: f.steps, WarmupSteps: f.warmup,
		Base: map[string]any{"nodes": f.nodes, "gpus_per_node": f.gpusPerNode, "mixed_precision": f.precision, "wrap_policy": sim.WrapTransformer}}
	for _, c := range top {
		rc := c.Config
		spec.Include = append(spec.Include, map[string]any{"batch_per_device": rc.BatchPerDevice, "grad_accum": rc.GradAccum,
			"sharding": rc.Sharding, "activation_checkpointing": rc.ActivationCheckpointing,
			"backward_prefetch": rc.BackwardPrefetch, "forward_prefetch": rc.ForwardPrefetch, "cpu_offload": rc.CPUOffload})
	}
	data, err := yaml.Marshal(spec)
	if err != nil {
		return failure(err)
	}
	reg, err := newRegistry()
	if err != nil {
		return failure(err)
	}
	plan, err := sweeps.Parse(data, "recommend --measure", sweeps.Options{Set: f.sets, CheckModel: shapes.Check, CheckHardware: hardware.Check,
		CheckBackend: func(n string) error { _, err := reg.Get(n); return err }, GPUsPerNode: gpusPerNode})
	if err != nil {
		return usageError(err)
	}
	if err := harness.Preflight(cmd.Context(), plan, reg); err != nil {
		return specFailure(err)
	}
	if err := checkResultsDir("results", f.resultsDir, plan.Name, plan.Runs); err != nil {
		return err // once, before anything runs, as sweep does
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "\nmeasuring the top %d with %s (%s) into %s\n", len(top), f.backend, f.launcher, filepath.Join(f.resultsDir, name))
	opts := harness.Options{ResultsDir: f.resultsDir, Jobs: 1, Registry: reg, Out: stderr,
		Progress: harness.ProgressMode(f.progress), Env: results.Env{Fsdpbench: version(), Commit: commit()},
		Annotate: sim.Annotator(cal, simOpts)}
	sum, runErr := harness.Run(cmd.Context(), plan, opts)
	if runErr != nil {
		var refused *harness.RefusedError
		if errors.As(runErr, &refused) {
			return usageError(runErr)
		}
		return specFailure(runErr)
	}
	stored, err := results.Load(sum.Dir)
	if err != nil {
		return failure(err)
	}
	byID := map[string]results.Run{}
	for _, r := range stored {
		byID[r.Config.ID] = r
	}
	var runs []results.Run
	for _, rc := range plan.Runs {
		if r, ok := byID[rc.ID]; ok {
			runs = append(runs, r)
		}
	}
	w := cmd.OutOrStdout()
	fmt.Fprintln(w)
	if err := writePredictedVsMeasured(w, runs); err != nil {
		return failure(err)
	}
	fmt.Fprintf(w, "\nfeed the measurements to the model:  fsdpbench calibrate %s   (then recommend again; add earlier results directories to fit more runs)\n", sum.Dir)
	if sum.Failures() > 0 {
		return failure(fmt.Errorf("%d of %d measured runs failed or timed out; their errors are in %s/runs/<run-id>/stderr.log", sum.Failures(), sum.Total, sum.Dir))
	}
	return nil
}

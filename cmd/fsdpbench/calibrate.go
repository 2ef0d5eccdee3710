package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/plugins"
	"github.com/fsdpbench/fsdpbench/results"
)

// A calibration's keys may name plugin backends (PROFILE/BACKEND): the sim
// checks them against the plugins on the plugin path, as the registry finds
// them, so that a key of no backend at all is refused when the file is read.
func init() {
	sim.PluginBackends = func() []string {
		var names []string
		for _, f := range plugins.Discover(plugins.SearchPath()) {
			names = append(names, f.Name)
		}
		return names
	}
}

func newCalibrateCmd() *cobra.Command {
	var (
		out, resultsDir, format string
		dryRun                  bool
		wholeRun                bool
	)
	cmd := &cobra.Command{
		Use:   "calibrate DIR...",
		Short: "Fit the analytic model's free constants to measured runs; report leave-one-out errors",
		Long: `calibrate reads measured runs (results directories or ` + "`fsdpbench export --format json`" + ` files,
ingested runs included; the sim's own predictions are left out) and fits the sim's
free constants per hardware profile: compute efficiency and how it grows with model
size, the fraction of the profile's intra- and inter-node bus bandwidth reached, the
share of forward all-gathers hidden without forward_prefetch, the share of activation
checkpointing's recompute the step pays (from checkpointed runs), a factor per memory
category (params, grads, optimizer, activations, logits, buffers), PyTorch's reserved
/ allocated factor and the device memory outside the allocator (CUDA context, NCCL).
A constant the runs cannot tell is kept at the model's value and listed with why.
Each run is predicted as it ran: a sim run under its own backend_options (loss,
checkpointing, fsdp_version, fabric), another backend's under what that backend does.
Every constant stays inside a physically plausible range (efficiency at most 0.75 of
peak), and a prediction outside the model sizes, nodes and sequence lengths fitted
says it extrapolates.

It writes a calibration file (JSON, versioned; default <results>/calibration.json)
and prints, per run, the leave-one-out error: the run's prediction by constants
fitted to the other runs, against its measurement. Use the file with
` + "`plan --calibration FILE`, `recommend --calibration FILE`" + ` or the sim's backend option
calibration; a calibrated prediction says so in its notes and in metrics.json.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// What is written, and how, is checked before the runs are read and
			// fitted (a minute for a hundred runs): a directory given as -o, or a
			// misspelt --format, used to be refused only after the whole fit.
			if format != results.FormatTable && format != results.FormatJSON && format != "" {
				return usageError(fmt.Errorf("--format %q: use table or json", format))
			}
			if out == "" {
				out = filepath.Join(resultsDir, sim.CalibrationFile)
			}
			// The default lies in the results directory, which may not exist yet.
			mkdir := resultsDir != "" && !cmd.Flags().Changed("out")
			if !dryRun {
				if err := results.CheckOutput(out, mkdir); err != nil {
					flag := "-o"
					if mkdir {
						flag = "--results" // the default -o lies in it
					}
					return usageError(fmt.Errorf("%s: %w", flag, err))
				}
			}
			var runs []results.Run
			for _, dir := range args {
				rs, err := results.LoadPath(dir)
				if err != nil {
					return usageError(err)
				}
				runs = append(runs, rs...)
			}
			ms, skipped := sim.Measurements(runs, wholeRun)
			for _, s := range skipped {
				fmt.Fprintln(cmd.ErrOrStderr(), "calibrate: left out", s)
			}
			if len(ms) == 0 {
				return usageError(fmt.Errorf("none of the %d runs in %s is a measured ok run with tokens/s or memory: give results of a real backend (gotrain, torchrun, a plugin, ingested runs)",
					len(runs), strings.Join(args, ", ")))
			}
			update, stop := fitProgress(cmd.ErrOrStderr())
			cal, err := sim.FitContext(cmd.Context(), ms, sim.FitOptions{Progress: update})
			stop()
			if err != nil {
				if cmd.Context().Err() != nil {
					return &exitError{code: ExitInterrupted, err: errors.New("calibrate: interrupted; nothing was written")}
				}
				return failure(fmt.Errorf("calibrate: %w", err))
			}
			w := cmd.OutOrStdout()
			if !dryRun {
				b, err := cal.Encode()
				if err != nil {
					return failure(fmt.Errorf("write calibration: %w", err))
				}
				if mkdir {
					if err := os.MkdirAll(filepath.Dir(out), 0o777); err != nil {
						return usageError(fmt.Errorf("write calibration: %w", err))
					}
				}
				if err := writeOutput("-o", out, b, w); err != nil {
					return err
				}
				if results.IsStdout(out) {
					w = cmd.ErrOrStderr() // stdout holds the calibration file
				}
			}
			switch format {
			case results.FormatJSON:
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(cal); err != nil {
					return failure(err)
				}
			case results.FormatTable, "":
				if err := printCalibration(w, cal); err != nil {
					return failure(err)
				}
			default:
				return usageError(fmt.Errorf("--format %q: use table or json", format))
			}
			if !dryRun && !results.IsStdout(out) {
				fmt.Fprintf(cmd.ErrOrStderr(), "calibration: %s\nuse it:      fsdpbench plan SPEC --calibration %s   (or backend_options: {calibration: %s})\n", out, out, out)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "calibration file to write (default <results>/"+sim.CalibrationFile+"); - writes it to stdout and the report to stderr")
	cmd.Flags().StringVar(&resultsDir, "results", harness.DefaultResultsDir, "results directory the default --out lies in")
	cmd.Flags().StringVar(&format, "format", results.FormatTable, "table or json")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "fit and report, write nothing")
	cmd.Flags().BoolVar(&wholeRun, "whole-run", false, "fit throughput to whole-run figures (†: ingested runs' wall time with start-up) too; by default only their memory is used")
	return cmd
}

// printCalibration prints each profile's constants and its runs' leave-one-out
// errors, with their mean and largest magnitude.
func printCalibration(w io.Writer, cal *sim.Calibration) error {
	for _, hw := range slices.Sorted(maps.Keys(cal.Profiles)) {
		k := cal.Profiles[hw]
		of := "of " + strings.Join(k.Fit.Backends, ", ")
		switch {
		case k.Fit.Ingested > 0 && len(k.Fit.Backends) == 0:
			of = "ingested (no backend ran them: keyed by their hardware alone)"
		case k.Fit.Ingested > 0:
			of += fmt.Sprintf(" and %d ingested", k.Fit.Ingested)
		}
		fmt.Fprintf(w, "%s: fitted to %d runs %s\n", hw, k.Fit.Runs, of)
		if k.ProfileFile != "" {
			fmt.Fprintf(w, "user-defined profile: %s (the constants apply to predictions on a profile file named %s)\n", k.ProfileFile, strings.Split(hw, "/")[0])
		}
		rows := [][]string{{sim.ConstEfficiency, fmt.Sprintf("%.4g at %.0e params", k.Efficiency, sim.RefParams)}}
		if k.EfficiencySizeExponent != 0 {
			rows = append(rows, []string{sim.ConstSizeExponent, fmt.Sprintf("%.4g", k.EfficiencySizeExponent)})
		}
		if k.IntraNodeBWFactor != 0 {
			rows = append(rows, []string{sim.ConstIntraBW, fmt.Sprintf("%.4g", k.IntraNodeBWFactor)})
		}
		if k.InterNodeBWFactor != 0 {
			rows = append(rows, []string{sim.ConstInterBW, fmt.Sprintf("%.4g", k.InterNodeBWFactor)})
		}
		if k.StepOverheadS != 0 {
			rows = append(rows, []string{sim.ConstStepOverhead, fmt.Sprintf("%.3g s", k.StepOverheadS)})
		}
		if k.CollectiveLatencyS != 0 {
			rows = append(rows, []string{sim.ConstLatency, fmt.Sprintf("%.3g s", k.CollectiveLatencyS)})
		}
		if k.ForwardOverlap != nil {
			rows = append(rows, []string{sim.ConstForwardOverlap, fmt.Sprintf("%.4g", *k.ForwardOverlap)})
		}
		if k.RankShareExponent != nil {
			rows = append(rows, []string{sim.ConstRankShare, fmt.Sprintf("%.4g", *k.RankShareExponent)})
		}
		if k.HostWaitShare != nil {
			rows = append(rows, []string{sim.ConstHostWait, fmt.Sprintf("%.4g of sharing the host's cost, waited in collectives", *k.HostWaitShare)})
		}
		if k.RecomputeShare != nil {
			rows = append(rows, []string{sim.ConstRecompute, fmt.Sprintf("%.4g of the forward recomputed", *k.RecomputeShare)})
		}
		for _, cat := range slices.Sorted(maps.Keys(k.MemFactors)) {
			rows = append(rows, []string{"mem_factors." + cat, fmt.Sprintf("%.4g", k.MemFactors[cat])})
		}
		if k.ReservedFactor != 0 {
			rows = append(rows, []string{sim.ConstReserved, fmt.Sprintf("%.4g", k.ReservedFactor)})
		}
		if k.OverheadBytes != nil {
			rows = append(rows, []string{sim.ConstOverhead, fmt.Sprintf("%.1f MiB", float64(*k.OverheadBytes)/(1<<20))})
		}
		if err := writeTable(w, []string{"constant", "value"}, rows); err != nil {
			return err
		}
		for _, kept := range k.Fit.Kept {
			fmt.Fprintln(w, "kept:", kept)
		}
		if r := k.Fit.Range; r != nil {
			// Predictions outside it say they extrapolate; say where it is.
			fmt.Fprintf(w, "fitted range: %s to %s params, %s nodes, seq_len %s (a prediction outside it says so; every constant is kept inside its plausible range, efficiency at most %.2f of peak)\n",
				humanCount(r.MinParams), humanCount(r.MaxParams), spanInts(r.MinNodes, r.MaxNodes), spanInts(r.MinSeqLen, r.MaxSeqLen), sim.MaxCalibratedEfficiency)
		}
		for _, warn := range k.Fit.Warnings {
			fmt.Fprintln(w, "warning:", warn)
		}
		var loo [][]string
		var memAbs, tputAbs, quietAbs []float64
		for _, r := range k.Fit.LeaveOneOut {
			spread := "-"
			if r.TputSpread != nil {
				spread = fmt.Sprintf("%.1f%%", *r.TputSpread*100)
			}
			backend := r.Backend
			if backend == "" {
				backend = "ingested"
			}
			loo = append(loo, []string{r.Run, backend, pct(r.MemErr), pct(r.TputErr), spread})
			if r.MemErr != nil {
				memAbs = append(memAbs, math.Abs(*r.MemErr))
			}
			if r.TputErr != nil {
				tputAbs = append(tputAbs, math.Abs(*r.TputErr))
				if r.TputSpread != nil && *r.TputSpread <= quietSpread {
					quietAbs = append(quietAbs, math.Abs(*r.TputErr))
				}
			}
		}
		loo = append(loo, []string{"mean |error|", "", meanPct(memAbs), meanPct(tputAbs), ""},
			[]string{"max |error|", "", maxPct(memAbs), maxPct(tputAbs), ""})
		fmt.Fprintln(w)
		if k.Fit.Folds > 0 && k.Fit.Folds < k.Fit.Runs {
			fmt.Fprintf(w, "leave-one-out in %d folds (more than %d runs: the runs are dealt into %d folds, each left out at once): each run predicted by constants fitted to the runs outside its fold (predicted / measured - 1);\n",
				k.Fit.Folds, sim.MaxFolds, k.Fit.Folds)
		} else {
			fmt.Fprintln(w, "leave-one-out: each run predicted by constants fitted to the others (predicted / measured - 1);")
		}
		fmt.Fprintln(w, "repeat spread: max / min - 1 of the run's own repeats' tokens/s (the machine's noise; the fit uses their median)")
		if err := writeTable(w, []string{"run", "backend", "memory error", "tokens/s error", "repeat spread"}, loo); err != nil {
			return err
		}
		if len(quietAbs) > 0 {
			fmt.Fprintf(w, "tokens/s error of the %d runs whose repeats agree within %.0f%%: mean %s, max %s\n",
				len(quietAbs), quietSpread*100, meanPct(quietAbs), maxPct(quietAbs))
		}
	}
	return nil
}

// fitProgress reports a long fit's progress on stderr, so that a fit of many
// runs is seen to move (98 runs printed nothing for 15 minutes): nothing for a
// fit done within progressAfter, then a line every progressEvery saying how many
// of the profile's fits are done. update is sim.FitOptions.Progress; stop ends
// the reports.
func fitProgress(stderr io.Writer) (update func(profile string, done, total int), stop func()) {
	var mu sync.Mutex
	var profile string
	var done, total int
	start := time.Now()
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-time.After(progressAfter):
		case <-quit:
			return
		}
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			mu.Lock()
			fmt.Fprintf(stderr, "calibrate: %s: %d of %d fits done (the fit to all runs, then one per held-out fold), %.0f s\n",
				profile, done, total, time.Since(start).Seconds())
			mu.Unlock()
			select {
			case <-tick.C:
			case <-quit:
				return
			}
		}
	}()
	update = func(p string, d, t int) {
		mu.Lock()
		profile, done, total = p, d, t
		mu.Unlock()
	}
	stop = func() {
		close(quit)
		<-finished
	}
	return update, stop
}

// Progress of a long fit: first after progressAfter, then every progressEvery.
const (
	progressAfter = 2 * time.Second
	progressEvery = 5 * time.Second
)

// humanCount writes a parameter count as 760M, 13B.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3gB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.3gM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

// spanInts is "lo" or "lo-hi".
func spanInts(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// quietSpread is the repeat spread under which a run's tokens/s is steady enough
// to judge the model by: the 15% throughput target.
const quietSpread = 0.15

func pct(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", *p*100)
}

func meanPct(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return fmt.Sprintf("%.1f%%", s/float64(len(xs))*100)
}

func maxPct(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", slices.Max(xs)*100)
}

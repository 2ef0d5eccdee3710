package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// Bounds of ab --pairs: fewer than results.MinStatRepeats pairs give no
// confidence interval; more than sweeps.MaxRepeats is past what a spec allows.
const (
	abMinPairs     = results.MinStatRepeats
	abDefaultPairs = 10
)

// abOrders are the values of ab --order.
var abOrders = results.ABOrders

// abMarker is the environment variable that tells A's runs from B's: its value
// (a or b) enters each run's ID, so two variants that differ only in a setting
// outside the ID (backend_options given once, the binary on PATH) still get a
// run directory each.
const abMarker = "AB_VARIANT"

func newABCmd() *cobra.Command {
	var (
		sets, aSets, bSets []string
		opts               harness.Options
		pairs              int
		order, progress    string
		metric             string
		confidence         float64
	)
	cmd := &cobra.Command{
		Use:   "ab SPEC --a KEY=VALUE... --b KEY=VALUE...",
		Short: "Measure two variants of a spec alternately and report B's change against A with its confidence interval",
		Long: `ab runs every point of SPEC twice, as A (SPEC with the --a settings) and as B (with
the --b settings), KEY=VALUE as sweep --set takes them: two binaries, two Python
environments or two option sets are two values (--a backend_options.blas=gonum
--b backend_options.blas=openblas). A and B alternate on this machine in one
window, a pair of adjacent repeats per round: abba (the default) runs A then B,
then B then A, so that neither always goes first and a steady drift weighs on
both alike; abab runs A first in every pair.

For each metric with per-repeat figures it reports the median over the pairs of
B/A - 1 and its confidence interval (95%, or --confidence) (from order statistics, as benchstat: no
assumption of normal noise, and a pair a disturbance hit moves the median
little; equal-tailed, so that each side's chance of missing is at most half of
1 - confidence). Pairing takes the machine out of the comparison: a slow minute
slows both sides of a pair. At least 6 pairs are needed for a 95% interval, 8
for 99%. Each repeat records what the machine was doing (env.machine); ab.json
keeps each pair's A and B states, and a pair whose A and B ran under materially
different ones is listed after the table (gate --ab decides whether such pairs
could explain its verdict).

The runs go to <results>/<name>-ab/ (one directory per run, A's and B's), the
comparison to its ab.json, which gate takes: fsdpbench gate --ab DIR --rule ...
Every ab measures afresh: a comparison resumed later would not be one window.

Exit codes: 0 compared; 1 a run of A or B did not finish ok; 2 usage error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(aSets) == 0 && len(bSets) == 0 {
				return usageError(errors.New("give what differs: --a KEY=VALUE and/or --b KEY=VALUE (as sweep --set takes them), e.g. --a backend_options.blas=gonum --b backend_options.blas=openblas"))
			}
			if pairs < abMinPairs || pairs > sweeps.MaxRepeats {
				return usageError(fmt.Errorf("--pairs %d: give %d to %d (fewer than %d pairs give no confidence interval)", pairs, abMinPairs, sweeps.MaxRepeats, abMinPairs))
			}
			if !(confidence >= results.MinABConfidence && confidence <= results.MaxABConfidence) {
				return usageError(fmt.Errorf("--confidence %v: give a level from %g to %g, such as 0.95 or 0.99", confidence, results.MinABConfidence, results.MaxABConfidence))
			}
			if need := results.MinPairs(confidence); pairs < need {
				// Fewer pairs give no interval at this level: every check would be
				// inconclusive, after the whole measurement.
				return usageError(fmt.Errorf("--pairs %d: a %g%% confidence interval needs at least %d pairs; give --pairs %d or more, or a lower --confidence", pairs, 100*confidence, need, need))
			}
			if !slices.Contains(abOrders, order) {
				return usageError(fmt.Errorf("--order %q: use %s", order, strings.Join(abOrders, " or ")))
			}
			if _, err := results.LookupColumn(metric, results.KindMetric); err != nil {
				return usageError(fmt.Errorf("--metric: %w", err))
			}
			reg, err := newRegistry()
			if err != nil {
				return failure(err)
			}
			base, err := loadPlan(args[0], sets, reg)
			if err != nil {
				return err
			}
			name := base.Name + "-ab"
			if len(name) > 100 {
				name = name[len(name)-100:]
			}
			load := func(side string, extra []string) (*sweeps.Plan, error) {
				all := append(slices.Clone(sets), extra...)
				all = append(all, "name="+name, fmt.Sprintf("repeats=%d", pairs), "env."+abMarker+"="+side)
				p, err := loadPlan(args[0], all, reg)
				if err != nil {
					return nil, usageError(fmt.Errorf("variant %s (the --set flags, then the --%s flags, numbered in that order): %v", strings.ToUpper(side), side, err))
				}
				return p, nil
			}
			pa, err := load("a", aSets)
			if err != nil {
				return err
			}
			pb, err := load("b", bSets)
			if err != nil {
				return err
			}
			if len(pa.Runs) != len(pb.Runs) {
				return usageError(fmt.Errorf("A has %d runs and B %d: the variants must differ in settings, not in the points of the grid", len(pa.Runs), len(pb.Runs)))
			}
			for i := range pa.Runs {
				if pa.Runs[i].Search != "" {
					return usageError(errors.New("ab compares fixed points; a search (search: max_fit) has none: give the batch as an axis"))
				}
				if pa.Runs[i].Launcher == sweeps.LauncherSlurm || pb.Runs[i].Launcher == sweeps.LauncherSlurm {
					return usageError(errors.New("ab alternates A and B on this machine; launcher: slurm would queue each repeat: use launcher: local (--set launcher=local)"))
				}
			}
			plan := *pa
			plan.Resolved = nil // neither variant is the sweep's spec: ab.json says what ran
			plan.Runs = nil
			for i := range pa.Runs {
				plan.Runs = append(plan.Runs, pa.Runs[i], pb.Runs[i])
			}
			if err := checkResultsDir("results", opts.ResultsDir, plan.Name, plan.Runs); err != nil {
				return err // once, before anything runs, as sweep does
			}
			stderr := cmd.ErrOrStderr()
			printWarnings(stderr, &plan)
			switch m := harness.ProgressMode(progress); m {
			case "auto":
				opts.Progress = harness.ProgressAuto
			case harness.ProgressBars, harness.ProgressPlain, harness.ProgressNone:
				opts.Progress = m
			default:
				return usageError(fmt.Errorf("--progress %q: use auto, bars, plain or none", progress))
			}
			opts.Registry, opts.Out, opts.Inputs = reg, stderr, []string{args[0]}
			opts.Env = results.Env{Fsdpbench: version(), Commit: commit()}
			opts.RepeatOrder, opts.ReverseOddRounds, opts.Rerun, opts.Jobs = harness.RepeatsInterleaved, order == "abba", true, 1
			opts.OnConsole = notices.redirect
			sum, runErr := harness.Run(cmd.Context(), &plan, opts)
			var refused *harness.RefusedError
			switch {
			case cmd.Context().Err() != nil:
				return &exitError{code: ExitInterrupted, err: errors.New("interrupted; an A/B comparison is measured in one window, so run it again from the start")}
			case runErr != nil && errors.As(runErr, &refused):
				return usageError(runErr)
			case runErr != nil:
				return specFailure(runErr)
			}
			runs, err := results.Load(sum.Dir)
			if err != nil {
				return failure(err)
			}
			byID := map[string]*results.Run{}
			for i := range runs {
				byID[runs[i].Config.ID] = &runs[i]
			}
			ab := results.ABResult{Sweep: plan.Name, Order: order, A: aSets, B: bSets, Confidence: confidence}
			if ab.A == nil {
				ab.A = []string{}
			}
			if ab.B == nil {
				ab.B = []string{}
			}
			notOK := 0
			for i := range pa.Runs {
				ra, rb := byID[pa.Runs[i].ID], byID[pb.Runs[i].ID]
				if ra == nil || rb == nil {
					return failure(fmt.Errorf("the results of %s and %s are missing from %s", pa.Runs[i].ID, pb.Runs[i].ID, sum.Dir))
				}
				p := results.ABPointOf(ra, rb, confidence)
				if p.AStatus != results.StatusOK || p.BStatus != results.StatusOK {
					notOK++
				}
				ab.Points = append(ab.Points, p)
			}
			if err := results.WriteAB(sum.Dir, ab); err != nil {
				return failure(err)
			}
			printAB(cmd.OutOrStdout(), ab, metric)
			fmt.Fprintf(stderr, "results: %s\ngate:    fsdpbench gate --ab %s --rule %s:-5%%\n", sum.Dir, sum.Dir, metric)
			if notOK > 0 {
				return failure(fmt.Errorf("%d of %d points did not finish ok on both sides; their errors are in %s/runs/<run-id>/stderr.log", notOK, len(ab.Points), sum.Dir))
			}
			return nil
		},
	}
	setFlag(cmd, &sets)
	cmd.Flags().StringArrayVar(&aSets, "a", nil, "a setting of variant A, KEY=VALUE as --set takes it (repeatable)")
	cmd.Flags().StringArrayVar(&bSets, "b", nil, "a setting of variant B, KEY=VALUE as --set takes it (repeatable)")
	cmd.Flags().IntVar(&pairs, "pairs", abDefaultPairs, fmt.Sprintf("pairs of repeats (A and B each run this many times), %d to %d", abMinPairs, sweeps.MaxRepeats))
	cmd.Flags().StringVar(&order, "order", "abba", "abba: A B, then B A, ...; abab: A first in every pair")
	cmd.Flags().Float64Var(&confidence, "confidence", results.Confidence, fmt.Sprintf("level of the confidence intervals, %g to %g (0.99 for a gate that must not cry wolf on a noisy machine)", results.MinABConfidence, results.MaxABConfidence))
	cmd.Flags().StringVar(&metric, "metric", results.SampleTokensPerSPerRank, "the metric printed (ab.json holds every metric with per-repeat figures)")
	cmd.Flags().StringVar(&opts.ResultsDir, "results", harness.DefaultResultsDir, "results directory: the runs and ab.json go to <results>/<name>-ab/")
	cmd.Flags().StringVar(&progress, "progress", "auto", "progress display: auto (bars on a terminal), bars, plain, none")
	return cmd
}

// printAB writes the comparison of metric at each point, e.g.
//
//	point        A median  B median  B vs A (95% CI)            pairs
//	ws1-bs2-ddp  2.81e+04  1.52e+04  -45.9% [-48.0%, -44.1%]    10
func printAB(w io.Writer, ab results.ABResult, metric string) {
	fmt.Fprintf(w, "A: %s\nB: %s\n", strings.Join(quoteAll(ab.A), " "), strings.Join(quoteAll(ab.B), " "))
	fmt.Fprintf(w, "%s, B against A: median of the per-pair change B/A-1, %s order\n", metric, ab.Order)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "point\tA median\tB median\tB vs A (%s%% CI)\tpairs\t\n", strconv.FormatFloat(100*ab.Confidence, 'g', -1, 64))
	for _, p := range ab.Points {
		c := p.Change(metric)
		switch {
		case p.AStatus != results.StatusOK || p.BStatus != results.StatusOK:
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\n", p.Point, p.AStatus, p.BStatus)
		case c == nil || len(c.Changes) == 0:
			fmt.Fprintf(tw, "%s\t\t\tno per-repeat %s\t\t\n", p.Point, metric)
		case !c.Backed:
			fmt.Fprintf(tw, "%s\t%.4g\t%.4g\t%+.1f%% (no interval: fewer than %d pairs)\t%d\t\n", p.Point, c.AMedian, c.BMedian, 100*c.Median, results.MinPairs(ab.Confidence), len(c.Changes))
		default:
			fmt.Fprintf(tw, "%s\t%.4g\t%.4g\t%+.1f%% [%+.1f%%, %+.1f%%]\t%d\t\n", p.Point, c.AMedian, c.BMedian, 100*c.Median, 100*c.Lo, 100*c.Hi, len(c.Changes))
		}
	}
	_ = tw.Flush()
	// A pair whose A and B ran under different machine states is said here;
	// gate --ab decides whether such pairs could explain its verdict.
	for _, p := range ab.Points {
		for i, pr := range p.Pairs {
			if pr.MachineDiff != "" {
				fmt.Fprintf(w, "%s pair %d: A and B ran under different machine states: %s\n", termsafe.Line(p.Point), i+1, termsafe.Line(pr.MachineDiff))
			}
		}
	}
}

func quoteAll(xs []string) []string {
	if len(xs) == 0 {
		return []string{"(the spec as it is)"}
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = termsafe.Line(x)
	}
	return out
}

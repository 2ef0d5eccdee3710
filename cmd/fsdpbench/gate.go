package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/results"
)

func newGateCmd() *cobra.Command {
	var (
		baseline, current, rulesFile, format  string
		junitPath, markdownPath               string
		history, commit, date, inconclusive   string
		abPath                                string
		rules                                 []string
		alpha                                 float64
		failMissing, allowMissing, futureDate bool
	)
	cmd := &cobra.Command{
		Use:   "gate --baseline A --current B [--rule METRIC:-5%]...",
		Short: "Fail when the current results regressed against a baseline (for CI)",
		Long: `gate matches the runs of the current results with the baseline's by run ID and
applies every rule to every run. A and B are results directories or files written by
` + "`fsdpbench export --format json`" + `.

Rules: METRIC:-5% fails on a drop beyond 5%, METRIC:+3% on a rise beyond 3%,
METRIC>=0.35 and METRIC<=8e10 bound the current figure (plain units: bytes, fractions).
Without --rule or --rules: ` + strings.Join(results.DefaultRules, ", ") + `.
A rules file is YAML:  rules: [tokens_per_s_per_rank:-5%, mfu>=0.35]

With at least 6 repeats per side a change fails only when the interval the two
medians' 95% CIs allow for it lies wholly beyond the limit and the change is
significant (Mann-Whitney U, alpha 0.05, as benchstat); it passes when that interval
lies wholly within the limit. Otherwise the check is inconclusive: too noisy to
tell. A check of a timed figure (throughput, step time, MFU) is also inconclusive
when the two sides ran under machine states that differ materially and could
explain its verdict (a busier machine now a failure, a quieter one a pass) (env.machine:
other processes leaving more than 10% less of the CPU free on one side than on the
other, e.g. 40% free against 35% (where unknown, the load average per CPU more than 0.5 apart), CPU or GPU clock more than 10% apart, GPU throttled in more than
25 points more of the readings, other processes on the GPU on one side only). An
absolute bound inside the median's 95% CI is inconclusive too. With fewer than 6
repeats the threshold alone decides and the report says the comparison is not
statistically backed. An inconclusive check neither passes nor fails: when no
check failed and some were inconclusive the gate exits 3, so CI can measure again
(--inconclusive=fail or =pass count them as failures or as passing instead; the
report says which). A run that was ok in
the baseline and is oom, failed or timed out now fails; so does a run that did not
finish now (failed, timeout, canceled), a figure the baseline knew and the current
run does not, and a baseline run missing from the current results (--allow-missing
lets a partial night through). The gate also fails when the current results hold no
finished run, when every check was skipped, and when a rule given decided nothing.

--history DIR keeps each night: the current results are stored under
DIR/<date>-<commit>/ with the verdict (pass, fail or inconclusive), and without
--baseline the last night that passed is the baseline: the one stored last (a
night backfilled under an old --date counts from its date). The commit is --commit,
else $GITHUB_SHA, else the commit the results' manifest.json recorded (env.commit),
else a run's metrics.json's, else "unknown". A night is never replaced: another gate
of the same date and commit (measuring again after an inconclusive verdict) is
stored as DIR/<date>-<commit>-2/, and so on, each with its own verdict. A --date
after tomorrow (UTC) is refused unless --allow-future-date.

--ab DIR judges what ` + "`fsdpbench ab`" + ` measured (A the baseline, B the current) by the
confidence interval of B's paired change (recomputed from the pairs, equal-tailed):
a check fails when the whole interval is beyond the rule's limit, passes when it is
wholly within, and is inconclusive otherwise. A check of a timed figure is also
inconclusive when pairs whose A and B ran under machine states that differ
materially (the thresholds above) could explain its verdict, unless the other
pairs reach the verdict without them. --inconclusive
applies as above: exit 3 by default, or counted as failures or as passing. Its report
goes to stdout only (--format table or json): --junit, --markdown and --alpha are the
nightly gate's, and --ab refuses them.

Exit codes: 0 pass; 1 regression; 2 usage or data error; 3 inconclusive (no check
failed, some could not tell).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if abPath != "" {
				// An A/B result is its own input: its two sides ran side by side.
				if current != "" || baseline != "" || history != "" {
					return usageError(errors.New("--ab is the whole input (A is the baseline, B the current): drop --baseline, --current and --history"))
				}
				// The nightly gate's report files and test level have no meaning
				// here: refused, rather than silently not written or not applied.
				for _, n := range []struct{ flag, why string }{
					{"junit", "gate --ab writes its report to stdout only (--format table or json); keep the JSON (--format json > FILE) for CI"},
					{"markdown", "gate --ab writes its report to stdout only (--format table or json)"},
					{"alpha", "gate --ab judges by the confidence interval `fsdpbench ab --confidence` stored, not by a significance test; measure again with the confidence you want"},
				} {
					if cmd.Flags().Changed(n.flag) {
						return usageError(fmt.Errorf("--%s with --ab: %s", n.flag, n.why))
					}
				}
				if !slices.Contains(results.InconclusivePolicies, inconclusive) {
					return usageError(fmt.Errorf("--inconclusive %q: use %s", inconclusive, strings.Join(results.InconclusivePolicies, ", ")))
				}
				return gateAB(cmd, abPath, rules, rulesFile, format, inconclusive)
			}
			if current == "" {
				return usageError(errors.New("--current is required: the results directory (or exported JSON) to check"))
			}
			if baseline == "" && history == "" {
				return usageError(errors.New("give --baseline A (a results directory or exported JSON), or --history DIR to use the last passing night"))
			}
			if !(alpha > 0 && alpha < 1) {
				return usageError(fmt.Errorf("--alpha %v: give a significance level between 0 and 1 (exclusive), such as 0.05", alpha))
			}
			if failMissing && allowMissing {
				return usageError(errors.New("--fail-missing and --allow-missing contradict each other; missing runs fail by default"))
			}
			if !slices.Contains(results.InconclusivePolicies, inconclusive) {
				return usageError(fmt.Errorf("--inconclusive %q: use %s", inconclusive, strings.Join(results.InconclusivePolicies, ", ")))
			}
			if !slices.Contains(results.GateFormats, format) {
				return usageError(fmt.Errorf("--format %q: use %s", format, strings.Join(results.GateFormats, ", ")))
			}
			for _, out := range []struct{ flag, path, format string }{{"--junit", junitPath, results.FormatJUnit}, {"--markdown", markdownPath, results.FormatMarkdown}} {
				if out.path != "" && results.IsStdout(out.path) {
					// Two reports on one stream could be told apart by no reader.
					return usageError(fmt.Errorf("%s %s: stdout carries the --format %s report; for %s on stdout give --format %s instead", out.flag, out.path, format, out.format, out.format))
				}
			}
			var ruleList []results.Rule
			if len(rules) > 0 {
				rs, err := results.ParseRules(rules, "--rule")
				if err != nil {
					return usageError(err)
				}
				ruleList = append(ruleList, rs...)
			}
			if rulesFile != "" {
				rs, err := results.LoadRules(rulesFile)
				if err != nil {
					return usageError(err)
				}
				ruleList = append(ruleList, rs...)
			}
			if baseline != "" && samePath(baseline, current) {
				return usageError(fmt.Errorf("--baseline and --current are both %s: the gate would compare the results with themselves and always pass; give the baseline's results", current))
			}
			var night time.Time
			if history != "" {
				st, err := os.Stat(current)
				if err != nil || !st.IsDir() {
					return usageError(fmt.Errorf("--history stores the current results, so --current must be a results directory (got %s)", current))
				}
				if err := historyOutside(history, current); err != nil {
					return usageError(err)
				}
				night = time.Now().UTC()
				if date != "" {
					if night, err = time.Parse(time.DateOnly, date); err != nil {
						return usageError(fmt.Errorf("--date %q: write it as YYYY-MM-DD, e.g. 2026-01-31", date))
					}
					if !futureDate {
						if err := results.CheckNightDate(night, time.Now()); err != nil {
							return usageError(fmt.Errorf("--date: %w", err))
						}
					}
				}
			}

			baseName := baseline
			var baseRuns []results.Run
			noBaseline := false
			if baseline == "" {
				n, err := results.LastPassingNight(history)
				if err != nil {
					return usageError(err)
				}
				if n != nil {
					baseline, baseName = n.Dir, n.Name
				} else {
					baseName, noBaseline = "none (first night of "+history+")", true
					if ns, _ := results.Nights(history); len(ns) > 0 {
						baseName = "none (no night of " + history + " passed yet)"
					}
					if u := results.UnsealedNights(history); u > 0 {
						baseName = fmt.Sprintf("none (%d nights of %s passed but carry no checksum of their verdict: stored by an older fsdpbench, or edited; none is a baseline)", u, history)
					}
				}
			}
			if baseline != "" {
				var err error
				if baseRuns, err = results.LoadPath(baseline); err != nil {
					return usageError(fmt.Errorf("--baseline: %w", err))
				}
			}
			curRuns, err := results.LoadPath(current)
			if err != nil {
				return usageError(fmt.Errorf("--current: %w", err))
			}
			report, err := results.Gate(baseRuns, curRuns, results.GateOptions{Rules: ruleList, Alpha: alpha,
				AllowMissing: allowMissing, NoBaseline: noBaseline, BaselineName: baseName, CurrentName: current, Inconclusive: inconclusive})
			if err != nil {
				return usageError(err)
			}
			if err := report.Write(cmd.OutOrStdout(), format); err != nil {
				return usageError(err)
			}
			for _, out := range []struct{ path, format string }{{junitPath, results.FormatJUnit}, {markdownPath, results.FormatMarkdown}} {
				if out.path == "" {
					continue
				}
				var buf bytes.Buffer
				if err := report.Write(&buf, out.format); err != nil {
					return usageError(err)
				}
				if err := writeOutput("--"+out.format, out.path, buf.Bytes(), cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			if format == results.FormatJUnit || format == results.FormatJSON {
				fmt.Fprintln(cmd.ErrOrStderr(), report.Headline())
			}
			if history != "" {
				// The order the help gives: what the user said, what the CI job
				// checked out, what the sweep recorded.
				if commit == "" {
					commit = os.Getenv("GITHUB_SHA")
				}
				if commit == "" {
					commit = results.RecordedCommit(current, curRuns)
				}
				n, err := results.StoreNight(history, current, night, commit, report, baseName)
				if err != nil {
					return usageError(err)
				}
				verdict := "passed: the baseline of the next night"
				switch {
				case report.Verdict == results.OutcomeInconclusive:
					verdict = "inconclusive: the next night keeps the last passing baseline"
				case !n.Passed:
					verdict = "failed: the next night keeps the last passing baseline"
				}
				again := ""
				if n.Seq > 1 {
					again = fmt.Sprintf("; night %d of %s %s, the earlier ones kept", n.Seq, n.Date, nightCommit(n.Commit))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "stored night %s (%s%s)\n", n.Dir, verdict, again)
			}
			switch report.Verdict {
			case results.OutcomeInconclusive:
				return &exitError{code: ExitInconclusive}
			case results.OutcomePass:
			default:
				return &exitError{code: ExitFailed}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&baseline, "baseline", "", "baseline results: a results directory or an exported JSON file")
	f.StringVar(&current, "current", "", "current results: a results directory or an exported JSON file")
	f.StringVar(&abPath, "ab", "", "judge an A/B result: the `DIR` that fsdpbench ab wrote (or its ab.json), instead of --baseline and --current")
	f.StringArrayVar(&rules, "rule", nil, "a rule, e.g. tokens_per_s_per_rank:-5%, peak_mem_reserved_bytes:+3%, mfu>=0.35 (repeatable)")
	f.StringVar(&rulesFile, "rules", "", "YAML rules file (rules: [...]); adds to --rule")
	f.StringVar(&format, "format", results.FormatTable, "output on stdout: "+strings.Join(results.GateFormats, ", "))
	f.StringVar(&junitPath, "junit", "", "also write JUnit XML to this file (a device or FIFO is written through, a regular file replaced atomically)")
	f.StringVar(&markdownPath, "markdown", "", "also write the Markdown summary to this file (as --junit)")
	f.Float64Var(&alpha, "alpha", results.DefaultAlpha, "significance level with >= 6 repeats per side")
	f.StringVar(&inconclusive, "inconclusive", results.InconclusiveReport, "what inconclusive checks do when none failed: report (exit 3), fail (exit 1) or pass (exit 0)")
	f.BoolVar(&allowMissing, "allow-missing", false, "let baseline runs be missing from the current results (a partial night); by default each fails")
	f.BoolVar(&failMissing, "fail-missing", false, "fail when a baseline run is missing from the current results (the default now)")
	_ = f.MarkDeprecated("fail-missing", "missing runs fail by default; --allow-missing lets them through")
	f.StringVar(&history, "history", "", "history directory: store this night under DIR/<date>-<commit>/; without --baseline, compare with the last passing night")
	f.StringVar(&commit, "commit", "", "commit of this night (default: $GITHUB_SHA, else the commit manifest.json recorded, else a run's)")
	f.StringVar(&date, "date", "", "date of this night, written YYYY-MM-DD (default: today, UTC; at most tomorrow)")
	f.BoolVar(&futureDate, "allow-future-date", false, "store a --date after tomorrow as given (the baseline is still picked by when nights were stored)")
	return cmd
}

// historyOutside refuses a history directory inside the current results: storing
// the night copies the current results into the history, which would then copy
// itself, deeper each time. It refuses current results inside the history too: a
// stored night would be gated against itself, or against the night it replaces.
func historyOutside(history, current string) error {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return filepath.Clean(p)
		}
		if r, err := filepath.EvalSymlinks(a); err == nil {
			return r
		}
		// The history may not exist yet: resolve its parent.
		if r, err := filepath.EvalSymlinks(filepath.Dir(a)); err == nil {
			return filepath.Join(r, filepath.Base(a))
		}
		return a
	}
	h, c := abs(history), abs(current)
	inside := func(dir, path string) bool {
		rel, err := filepath.Rel(dir, path)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	if inside(c, h) {
		return fmt.Errorf("--history %s is inside --current %s: storing the night would copy the history into itself; keep the history outside the results directory", history, current)
	}
	if inside(h, c) {
		return fmt.Errorf("--current %s is inside --history %s: give the results the nightly job wrote, not a stored night", current, history)
	}
	return nil
}

// samePath reports whether a and b name the same file or directory.
func samePath(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// nightCommit is a night's commit as the history names it.
func nightCommit(c string) string {
	if c == "" {
		return "unknown"
	}
	return c
}

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// gateAB is `gate --ab PATH`: the relative rules applied to an A/B result
// (results.GateAB) under the inconclusive policy, in the table or JSON format.
// Its verdict and exit codes are the nightly gate's: 0 pass, 1 fail, 3
// inconclusive (results.GateVerdict decides both).
func gateAB(cmd *cobra.Command, path string, ruleTexts []string, rulesFile, format, policy string) error {
	if format != results.FormatTable && format != results.FormatJSON {
		return usageError(fmt.Errorf("--format %s: gate --ab writes %s or %s", format, results.FormatTable, results.FormatJSON))
	}
	var rules []results.Rule
	if len(ruleTexts) > 0 {
		rs, err := results.ParseRules(ruleTexts, "--rule")
		if err != nil {
			return usageError(err)
		}
		rules = append(rules, rs...)
	}
	if rulesFile != "" {
		rs, err := results.LoadRules(rulesFile)
		if err != nil {
			return usageError(err)
		}
		rules = append(rules, rs...)
	}
	if len(rules) == 0 {
		var err error
		if rules, err = results.ParseRules(results.DefaultRules, "default"); err != nil {
			return failure(err)
		}
	}
	ab, err := results.ReadAB(path)
	if err != nil {
		return usageError(fmt.Errorf("--ab: %w", err))
	}
	g, err := results.GateAB(ab, rules, policy)
	if err != nil {
		return usageError(err)
	}
	decided := 0
	for _, c := range g.Checks {
		if c.Outcome != results.OutcomeSkip {
			decided++
		}
	}
	if decided == 0 {
		// Nothing was compared: a pass would guarantee nothing.
		var why []string
		for _, s := range g.Skipped {
			why = append(why, s.Rule+": "+s.Why)
		}
		if len(ab.Points) == 0 {
			// ReadAB refuses such a file; said here too, so that the rules are
			// never blamed for a file with nothing in it.
			return usageError(fmt.Errorf("--ab %s holds no point: nothing to judge a change at; run ab again", path))
		}
		return usageError(fmt.Errorf("--ab %s: no rule judged a change (%s); give METRIC:-X%% or METRIC:+X%% on a figure the runs measured", path, strings.Join(why, "; ")))
	}
	out := cmd.OutOrStdout()
	if format == results.FormatJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(g); err != nil {
			return failure(err)
		}
		fmt.Fprintln(cmd.ErrOrStderr(), g.Headline())
	} else {
		fmt.Fprintf(out, "A/B %s: A %s, B %s\n", termsafe.Line(ab.Sweep), termsafe.Line(strings.Join(ab.A, " ")), termsafe.Line(strings.Join(ab.B, " ")))
		fmt.Fprintf(out, "%g%% confidence intervals; inconclusive checks %s\n", 100*g.Confidence, results.PolicyText(g.InconclusivePolicy))
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		for _, c := range g.Checks {
			outcome := string(c.Outcome)
			if c.Outcome == results.OutcomeFail {
				outcome = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", outcome, termsafe.Line(c.Point), c.Rule, termsafe.Line(c.Why))
		}
		_ = tw.Flush()
		for _, s := range g.Skipped {
			fmt.Fprintf(out, "skipped rule %s: %s\n", s.Rule, termsafe.Line(s.Why))
		}
		fmt.Fprintln(out, g.Headline())
	}
	switch g.Verdict {
	case results.OutcomeInconclusive:
		return &exitError{code: ExitInconclusive}
	case results.OutcomeFail:
		return &exitError{code: ExitFailed}
	}
	return nil
}

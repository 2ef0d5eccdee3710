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

// exitABInconclusive is gate --ab's exit when no check failed and some were
// inconclusive: CI may measure again (with more pairs). It is the code the
// gate's inconclusive verdict has (issue 29).
const exitABInconclusive = 3

// gateAB is `gate --ab PATH`: the relative rules applied to an A/B result
// (results.GateAB), in the table or JSON format.
func gateAB(cmd *cobra.Command, path string, ruleTexts []string, rulesFile, format string) error {
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
	checks, skipped := results.GateAB(ab, rules)
	if len(checks) == 0 {
		return usageError(fmt.Errorf("--ab %s: no rule to judge a change with (bound rules such as %s judge one side; give METRIC:-X%% or METRIC:+X%%)", path, strings.Join(skipped, ", ")))
	}
	fails, unsure := 0, 0
	for _, c := range checks {
		switch c.Outcome {
		case results.ABFail:
			fails++
		case results.ABInconclusive:
			unsure++
		}
	}
	verdict := "PASS"
	switch {
	case fails > 0:
		verdict = "FAIL"
	case unsure > 0:
		verdict = "INCONCLUSIVE"
	}
	out := cmd.OutOrStdout()
	if format == results.FormatJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Verdict string            `json:"verdict"`
			A       []string          `json:"a"`
			B       []string          `json:"b"`
			Checks  []results.ABCheck `json:"checks"`
			Skipped []string          `json:"skipped_rules,omitempty"`
		}{verdict, ab.A, ab.B, checks, skipped}); err != nil {
			return failure(err)
		}
	} else {
		fmt.Fprintf(out, "A/B %s: A %s, B %s\n", termsafe.Line(ab.Sweep), termsafe.Line(strings.Join(ab.A, " ")), termsafe.Line(strings.Join(ab.B, " ")))
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		for _, c := range checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Outcome, termsafe.Line(c.Point), c.Rule, termsafe.Line(c.Why))
		}
		_ = tw.Flush()
		if len(skipped) > 0 {
			fmt.Fprintf(out, "skipped (bound rules judge one side, not a change): %s\n", strings.Join(skipped, ", "))
		}
		fmt.Fprintf(out, "%s: %d checks, %d failed, %d inconclusive\n", verdict, len(checks), fails, unsure)
	}
	switch {
	case fails > 0:
		return &exitError{code: ExitFailed}
	case unsure > 0:
		return &exitError{code: exitABInconclusive}
	}
	return nil
}

package results

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestPropertyHistoryKeepsEveryNight (issue 37 item 4, as a property): whatever
// sequence of gates stores nights into one history (dates, commits, an unknown
// commit, verdicts pass/fail/inconclusive, the same date and commit over and
// over as "measure again" asks), every night is kept, with its own verdict,
// and the baseline is the last night that passed. Storing a night under its
// <date>-<commit> name alone, as before, replaced the earlier night of that
// name: the history then held fewer nights than the gates stored, and an
// inconclusive night's verdict stood where a failed one had been.
func TestPropertyHistoryKeepsEveryNight(t *testing.T) {
	cur := writeTree(t, filepath.Join(t.TempDir(), "cur"), []Run{gateRun(1, sweeps.FullShard, nil)})
	dates := []time.Time{time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)}
	commits := []string{"0123456789abcdef", "fedcba9876543210", ""}
	reports := map[Outcome]func() *GateReport{
		OutcomePass: func() *GateReport { return &GateReport{Verdict: OutcomePass, Passed: true, Checks: []Check{{}}} },
		OutcomeFail: func() *GateReport { return &GateReport{Verdict: OutcomeFail, Failures: 1, Checks: []Check{{}}} },
		OutcomeInconclusive: func() *GateReport {
			return &GateReport{Verdict: OutcomeInconclusive, Inconclusive: 1, Checks: []Check{{}}}
		},
	}
	verdicts := []Outcome{OutcomePass, OutcomeFail, OutcomeInconclusive}
	rapid.Check(t, func(rt *rapid.T) {
		hist := filepath.Join(t.TempDir(), "history")
		n := rapid.IntRange(1, 6).Draw(rt, "gates")
		stored := map[string]Outcome{} // night name -> the verdict its gate gave
		var lastPass string            // a passing night of the latest date that has one
		var lastPassDate time.Time
		for i := range n {
			date := rapid.SampledFrom(dates).Draw(rt, "date")
			commit := rapid.SampledFrom(commits).Draw(rt, "commit")
			v := rapid.SampledFrom(verdicts).Draw(rt, "verdict")
			night, err := StoreNight(hist, cur, date, commit, reports[v](), "")
			if err != nil {
				rt.Fatalf("gate %d (%s %q %s): %v", i, date.Format(time.DateOnly), commit, v, err)
			}
			if _, dup := stored[night.Name]; dup {
				rt.Fatalf("gate %d (%s %q %s) stored its night as %s, the name of an earlier night", i, date.Format(time.DateOnly), commit, v, night.Name)
			}
			stored[night.Name] = v
			if v == OutcomePass && (lastPass == "" || !date.Before(lastPassDate)) {
				lastPass, lastPassDate = night.Name, date
			}
		}
		nights, err := Nights(hist)
		require.NoError(rt, err)
		if len(nights) != len(stored) {
			rt.Fatalf("%d gates stored nights, the history holds %d", len(stored), len(nights))
		}
		for _, got := range nights {
			want, ok := stored[got.Name]
			if !ok {
				rt.Fatalf("the history holds %s, which no gate stored", got.Name)
			}
			if got.Verdict != want {
				rt.Fatalf("night %s: verdict %s, its gate said %s", got.Name, got.Verdict, want)
			}
		}
		last, err := LastPassingNight(hist)
		require.NoError(rt, err)
		if lastPass == "" {
			if last != nil {
				rt.Fatalf("no gate passed, yet %s is the baseline", last.Name)
			}
			return
		}
		if last == nil {
			rt.Fatalf("night %s passed, yet there is no baseline", lastPass)
		}
		// These dates are past, so a night counts as stored at its date's end
		// (storedOrder): the baseline is a passing night of the latest date
		// that has one.
		if stored[last.Name] != OutcomePass {
			rt.Fatalf("the baseline %s did not pass (%s)", last.Name, stored[last.Name])
		}
		if last.Date != lastPassDate.Format(time.DateOnly) {
			rt.Fatalf("the baseline %s is of %s; %s passed on the later %s", last.Name, last.Date, lastPass, lastPassDate.Format(time.DateOnly))
		}
	})
}

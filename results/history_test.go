package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestStoreNightNeverReplaces (issue 37 item 4): a failed night, then the gate
// measured again on the same date and commit (inconclusive), then once more
// (passed): three nights, -2 and -3 beside the first, each with its own
// verdict, each sealed by its checksum; the last one passing is the baseline.
func TestStoreNightNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	cur := writeTree(t, filepath.Join(dir, "cur"), []Run{gateRun(1, sweeps.FullShard, nil)})
	hist := filepath.Join(dir, "history")
	date := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, rep := range []*GateReport{
		{Verdict: OutcomeFail, Failures: 1, Checks: []Check{{}}},
		{Verdict: OutcomeInconclusive, Inconclusive: 1, Checks: []Check{{}}},
		{Verdict: OutcomePass, Passed: true, Checks: []Check{{}}},
	} {
		_, err := StoreNight(hist, cur, date, "0123456789abcdef", rep, "")
		require.NoError(t, err)
	}
	nights, err := Nights(hist)
	require.NoError(t, err)
	require.Len(t, nights, 3)
	var names []string
	var verdicts []Outcome
	for _, n := range nights {
		names, verdicts = append(names, n.Name), append(verdicts, n.Verdict)
		require.NoError(t, verifyNight(n.Dir), n.Name)
	}
	assert.Equal(t, []string{"2026-03-02-0123456789ab", "2026-03-02-0123456789ab-2", "2026-03-02-0123456789ab-3"}, names)
	assert.Equal(t, []Outcome{OutcomeFail, OutcomeInconclusive, OutcomePass}, verdicts)
	assert.Equal(t, []int{1, 2, 3}, []int{nights[0].Seq, nights[1].Seq, nights[2].Seq})
	last, err := LastPassingNight(hist)
	require.NoError(t, err)
	require.NotNil(t, last)
	assert.Equal(t, "2026-03-02-0123456789ab-3", last.Name)
}

// TestOlderNightsStillRead: night.json files older versions wrote (no verdict,
// no seq) read, with the verdict they stood for: passed, failed (a check failed
// or a problem), inconclusive (neither); an older passing night with its
// checksum stays a baseline.
func TestOlderNightsStillRead(t *testing.T) {
	hist := t.TempDir()
	cur := writeTree(t, filepath.Join(t.TempDir(), "cur"), []Run{gateRun(1, sweeps.FullShard, nil)})
	for _, n := range []Night{
		{Name: "2026-03-01-aaaa", Date: "2026-03-01", Commit: "aaaa", Passed: true, Checks: 3},
		{Name: "2026-03-02-bbbb", Date: "2026-03-02", Commit: "bbbb", Failures: 1, Checks: 3},
		{Name: "2026-03-03-cccc", Date: "2026-03-03", Commit: "cccc", Checks: 3, Problems: []string{"rule x decided nothing"}},
		{Name: "2026-03-04-dddd", Date: "2026-03-04", Commit: "dddd", Checks: 3},
	} {
		d := filepath.Join(hist, n.Name)
		require.NoError(t, os.CopyFS(d, os.DirFS(cur)))
		n.StoredAt = time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
		var err error
		n.Checksum, err = nightChecksum(n, d)
		require.NoError(t, err)
		b, err := json.Marshal(n)
		require.NoError(t, err)
		assert.NotContains(t, string(b), `"verdict"`, "written as older versions did")
		require.NoError(t, os.WriteFile(filepath.Join(d, NightFile), b, 0o644))
	}
	nights, err := Nights(hist)
	require.NoError(t, err)
	var got []Outcome
	for _, n := range nights {
		got = append(got, n.Verdict)
	}
	assert.Equal(t, []Outcome{OutcomePass, OutcomeFail, OutcomeFail, OutcomeInconclusive}, got)
	last, err := LastPassingNight(hist)
	require.NoError(t, err)
	require.NotNil(t, last)
	assert.Equal(t, "2026-03-01-aaaa", last.Name)
}

// TestRecordedCommit (issue 37 item 4): the commit of a night is the one the
// sweep's manifest.json recorded, which every backend's sweep writes; gotrain's
// metrics.json carries none.
func TestRecordedCommit(t *testing.T) {
	dir := t.TempDir()
	runs := []Run{gateRun(1, sweeps.FullShard, nil)}
	writeTree(t, filepath.Join(dir, "nightly"), runs)
	loaded, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, "", RecordedCommit(dir, loaded), "nothing recorded")
	sd := &SweepDir{Path: filepath.Join(dir, "nightly")}
	require.NoError(t, sd.WriteManifest(Manifest{Sweep: "nightly", Env: Env{Commit: "feedbeef1234"}}))
	assert.Equal(t, "feedbeef1234", RecordedCommit(dir, loaded), "the sweep's manifest, one level down")
	assert.Equal(t, "feedbeef1234", RecordedCommit(sd.Path, loaded), "the manifest of the directory given")
}

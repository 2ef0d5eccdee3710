package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// abFileWithMachines is an ab.json as ab writes it: one point, 6 pairs, each
// side's machine state per repeat; decoded as generic JSON for a hand edit.
func abFileWithMachines(t *testing.T) map[string]any {
	t.Helper()
	rc := fixtureConfig(1, sweeps.DDP)
	run := func() *Run {
		var reps []Result
		for range 6 {
			r := fixtureResult(rc)
			r.Env.Machine = &Machine{Repeats: 1, CPUs: 2, OtherCPUShare: F64(0.1)}
			reps = append(reps, r)
		}
		return &Run{Config: rc, Metrics: Normalize(rc, reps)}
	}
	p := ABPointOf(run(), run(), Confidence)
	p.ARun, p.BRun = "a-run", "b-run"
	require.Len(t, p.Pairs, 6)
	dir := t.TempDir()
	require.NoError(t, WriteAB(dir, ABResult{Sweep: "s-ab", Order: "abba", Confidence: Confidence, A: []string{"x=1"}, B: []string{"x=2"}, Points: []ABPoint{p}}))
	_, err := ReadAB(dir)
	require.NoError(t, err, "ab.json as ab writes it reads back")
	b, err := os.ReadFile(filepath.Join(dir, ABFile))
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	return doc
}

// TestReadABBounds (issue 39 item 2): ab.json edited by hand past what ab
// writes is refused when read back, the error naming the file and the field:
// a million changes in one metric (ab --pairs stops at 1000), a point listed
// twice, a change of 1e308, order "xyz", 2 machine states for 6 changes.
func TestReadABBounds(t *testing.T) {
	point := func(doc map[string]any) map[string]any { return doc["points"].([]any)[0].(map[string]any) }
	metric := func(doc map[string]any) map[string]any { return point(doc)["metrics"].([]any)[0].(map[string]any) }
	for _, tt := range []struct {
		name, field, says string
		edit              func(doc map[string]any)
	}{
		{"a million changes", "points[0].metrics[0].changes", "more than the 1000 pairs ab measures at most", func(doc map[string]any) {
			xs := make([]any, 1_000_000)
			for i := range xs {
				xs[i] = 0.0
			}
			metric(doc)["changes"] = xs
		}},
		{"a point listed twice", "points[1]", "is listed twice (points[0] has the same a_run)", func(doc map[string]any) {
			doc["points"] = append(doc["points"].([]any), point(doc))
		}},
		{"a change of 1e308", "points[0].metrics[0].changes[2]", "1e+308 is not a pair's change from -100% to +1e+11%", func(doc map[string]any) {
			metric(doc)["changes"].([]any)[2] = 1e308
		}},
		{"an interval to 1e308", "points[0].metrics[0].hi", "is not a change from -100%", func(doc map[string]any) {
			metric(doc)["hi"] = 1e308
		}},
		{"no point (item 9)", "points", "is empty: the file holds no point to judge a change at", func(doc map[string]any) {
			doc["points"] = []any{}
		}},
		{"order xyz", "order", `"xyz" is not an order ab runs (abba, abab)`, func(doc map[string]any) { doc["order"] = "xyz" }},
		{"2 machine states for 6 changes", "points[0].pairs", "holds 2 pairs' machine states for 6 pairs' changes", func(doc map[string]any) {
			point(doc)["pairs"] = point(doc)["pairs"].([]any)[:2]
		}},
		{"a metric listed twice", "points[0].metrics[1].metric", "is listed already (points[0].metrics[0])", func(doc map[string]any) {
			point(doc)["metrics"] = append([]any{metric(doc)}, point(doc)["metrics"].([]any)...)
		}},
		{"a dropped pair twice", "points[0].metrics[0].dropped[1]", "is not a pair number", func(doc map[string]any) {
			m := metric(doc)
			m["changes"] = m["changes"].([]any)[:4]
			m["dropped"] = []any{1, 1}
		}},
		{"an interval over 3 pairs", "points[0].metrics[0].backed", "an interval over 3 pairs: at a 95% level, at least 6 give one", func(doc map[string]any) {
			m := metric(doc)
			m["changes"] = m["changes"].([]any)[:3]
		}},
		{"an unknown status", "points[0].b_status", `"great" is not a run status`, func(doc map[string]any) { point(doc)["b_status"] = "great" }},
		{"a side's machine over its repeats", "points[0].a_machine.repeats", "is not between 0 and 6 for a run of 6 repeats", func(doc map[string]any) {
			point(doc)["a_machine"].(map[string]any)["repeats"] = 999
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := abFileWithMachines(t)
			tt.edit(doc)
			b, err := json.Marshal(doc)
			require.NoError(t, err)
			path := filepath.Join(t.TempDir(), ABFile)
			require.NoError(t, os.WriteFile(path, b, 0o644))
			_, err = ReadAB(path)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), path+": "+tt.field+": "), "names the file and the field: %v", err)
			assert.Contains(t, err.Error(), tt.says)
			assert.Less(t, len(err.Error()), 600, "the message stays short")
		})
	}
}

// TestPairedChangeDropsChangesPastTheBound: a pair whose change ReadAB would
// refuse is dropped when ab writes it, as a pair with no ratio is, so that
// what ab writes always reads back.
func TestPairedChangeDropsChangesPastTheBound(t *testing.T) {
	c := PairedChange("mfu", []float64{1, 1e-300, 1}, []float64{1, 1, 2}, Confidence)
	assert.Equal(t, []int{1}, c.Dropped)
	assert.Equal(t, []float64{0, 1}, c.Changes)
}

// TestCheckMachineAgainstRepeats (issue 39 item 2): a machine summary in
// metrics.json is checked against the run's repeats and against itself, as
// SummarizeMachine writes it: 100,000 per-repeat states for a 6-repeat run,
// repeats 999 with 6 states, other_cpu_share_max below other_cpu_share.
func TestCheckMachineAgainstRepeats(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	var reps []Result
	for range 6 {
		r := fixtureResult(rc)
		r.Env.Machine = &Machine{Repeats: 1, CPUs: 2, OtherCPUShare: F64(0.2)}
		reps = append(reps, r)
	}
	good := Normalize(rc, reps)
	require.Len(t, good.Env.Machine.PerRepeat, 6)
	require.NoError(t, CheckMetrics(&rc, &good), "as written")
	for _, tt := range []struct {
		name, field, says string
		edit              func(*Machine)
	}{
		{"100,000 per-repeat states", "env.machine.per_repeat", "holds 100000 states for a run of 6 repeats", func(m *Machine) {
			m.PerRepeat = make([]Machine, 100_000)
		}},
		{"repeats 999", "env.machine.repeats", "999 is not between 0 and 6 for a run of 6 repeats", func(m *Machine) { m.Repeats = 999 }},
		{"repeats 5 with 6 states read", "env.machine.repeats", "5 does not count the 6 per-repeat states (6 of them read)", func(m *Machine) { m.Repeats = 5 }},
		{"max below the share", "env.machine.other_cpu_share_max", "0.1 is below other_cpu_share 0.2", func(m *Machine) { m.OtherCPUShareMax = F64(0.1) }},
		{"a repeat above the max", "env.machine.per_repeat[3].other_cpu_share", "0.9 is above the summary's other_cpu_share_max 0.2", func(m *Machine) {
			m.PerRepeat[3].OtherCPUShare = F64(0.9)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := Normalize(rc, reps)
			tt.edit(m.Env.Machine)
			err := CheckMetrics(&rc, &m)
			var ie *InvalidRunError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tt.field, ie.Field)
			assert.Contains(t, ie.Msg, tt.says)
		})
	}
}

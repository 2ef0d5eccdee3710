package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// resultWithSteps is one ok repeat of rc whose measured steps took steps
// seconds each (the wall time their sum).
func resultWithSteps(rc sweeps.RunConfig, steps ...float64) Result {
	res := Result{Status: StatusOK, WorldSize: rc.WorldSize, TokensPerStep: rc.TokensPerStep(),
		ModelFlopsPerToken: 1e6, PeakFlopsPerS: 1e12, PeakMemAllocatedBytes: I64(64 << 20)}
	for i, s := range steps {
		res.Steps = append(res.Steps, Step{Step: i + 1, StepTimeS: s, Tokens: rc.TokensPerStep()})
		res.MeasuredWallS += s
	}
	return res
}

// cpuStrategiesPair is issue 37's item 7 on sweeps/examples/cpu-strategies.yaml
// (5 steps, 1 repeat, a busy machine): full_shard at world size 1 with steps of
// 3.9 to 87 ms, whose whole-run tokens/s and median step disagree 1.7×, and a
// quiet world size 2 that reads a scaling efficiency far above 100% over it.
func cpuStrategiesPair(t *testing.T) (noisy, quiet Run, runs []Run) {
	t.Helper()
	plan, err := sweeps.Load("../sweeps/examples/cpu-strategies.yaml", sweeps.Options{})
	require.NoError(t, err)
	pick := func(ws int) sweeps.RunConfig {
		for _, rc := range plan.Runs {
			if rc.WorldSize == ws && rc.Sharding == sweeps.FullShard && !rc.ActivationCheckpointing && rc.Nodes == 1 {
				return rc
			}
		}
		t.Fatalf("no full_shard run at world size %d", ws)
		return sweeps.RunConfig{}
	}
	rc1, rc2 := pick(1), pick(2)
	runs = []Run{
		{Config: rc1, Metrics: Normalize(rc1, []Result{resultWithSteps(rc1, 0.0039, 0.018, 0.020, 0.040, 0.087)})},
		{Config: rc2, Metrics: Normalize(rc2, []Result{resultWithSteps(rc2, 0.0160, 0.0161, 0.0159, 0.0162, 0.0160)})},
	}
	Derive(runs)
	return runs[0], runs[1], runs
}

// TestNoiseMarksIssue37CPUStrategies reproduces issue 37's item 7: the noisy
// run's timed figures and the scaling efficiency built on them are marked ?,
// a footnote says why with the limits, and CSV and JSON carry the reasons and
// the marks; the quiet run's own figures and every memory figure are not marked.
func TestNoiseMarksIssue37CPUStrategies(t *testing.T) {
	noisy, quiet, runs := cpuStrategiesPair(t)
	require.NotEmpty(t, noisy.Derived.Noise)
	assert.Contains(t, noisy.Derived.Noise, "step times spread 3.9 ms to")
	assert.Contains(t, noisy.Derived.Noise, "limit 50%")
	assert.Contains(t, noisy.Derived.Noise, "1.69× apart (limit 1.25×)")
	assert.Empty(t, quiet.Derived.Noise)
	require.NotNil(t, quiet.Derived.ScalingEfficiency)
	assert.Greater(t, *quiet.Derived.ScalingEfficiency, 2.0, "the efficiency the issue saw as fact")
	assert.Contains(t, quiet.Derived.ScalingEfficiencyNoise, "its baseline "+noisy.Config.ID+"'s: step times spread")

	var buf bytes.Buffer
	require.NoError(t, Report(&buf, runs, ReportOptions{Metrics: []string{"tokens_per_s_per_rank", "step_time_s.median",
		"mfu", "peak_mem_allocated_bytes", "scaling_efficiency"}}))
	table := buf.String()
	rowOf := func(id string) string {
		for _, l := range strings.Split(table, "\n") {
			if strings.Contains(l, id) {
				return l
			}
		}
		t.Fatalf("no row %s in\n%s", id, table)
		return ""
	}
	cells := func(row string) []string {
		var out []string
		for _, c := range strings.Split(row, "│") {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	n, q := cells(rowOf(noisy.Config.ID)), cells(rowOf(quiet.Config.ID))
	// │ run │ world_size │ gpus_per_node │ global_batch │ tok/s/rank │ step │ MFU │ peak │ scaling │
	last := len(n) - 2
	for _, j := range []int{last - 4, last - 3, last - 2} {
		assert.True(t, strings.HasSuffix(n[j], NoiseMark), "the noisy run's timed figure %q is marked", n[j])
		assert.False(t, strings.HasSuffix(q[j], NoiseMark), "the quiet run's %q is not", q[j])
	}
	assert.False(t, strings.HasSuffix(n[last-1], NoiseMark), "memory is not timed: %q", n[last-1])
	assert.True(t, strings.HasSuffix(q[last], NoiseMark), "a scaling efficiency over a noisy baseline is marked: %q", q[last])
	assert.Contains(t, table, NoiseMark+" too noisy to trust (limits: steps' p10 to p90 within 50% of the median step, repeats within ±10%, whole-run and median-step tokens/s within 1.25×")
	assert.Equal(t, 1, strings.Count(table, "  "+noisy.Config.ID+": step times spread 3.9 ms to"),
		"the noisy run is listed once, for its own figures and the efficiencies over it:\n%s", table)
	assert.NotContains(t, table, "  "+quiet.Config.ID+":", "the quiet run's figures are not why")

	// The report's CSV: a marks column after each marked figure.
	buf.Reset()
	require.NoError(t, Report(&buf, runs, ReportOptions{Format: FormatCSV, Metrics: []string{"tokens_per_s_per_rank", "peak_mem_allocated_bytes", "scaling_efficiency"}}))
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	col := func(name string) int { return slices.Index(recs[0], name) }
	require.GreaterOrEqual(t, col("tokens_per_s_per_rank.marks"), 0, "%v", recs[0])
	require.GreaterOrEqual(t, col("scaling_efficiency.marks"), 0, "%v", recs[0])
	assert.Less(t, col("peak_mem_allocated_bytes.marks"), 0, "no marks column for a figure with no mark")
	byID := map[string][]string{}
	for _, r := range recs[1:] {
		byID[r[0]] = r
	}
	assert.Equal(t, "noisy", byID[noisy.Config.ID][col("tokens_per_s_per_rank.marks")])
	assert.Equal(t, "", byID[quiet.Config.ID][col("tokens_per_s_per_rank.marks")])
	assert.Equal(t, "noisy", byID[quiet.Config.ID][col("scaling_efficiency.marks")])

	// The report's JSON: the same keys.
	buf.Reset()
	require.NoError(t, Report(&buf, runs, ReportOptions{Format: FormatJSON, Metrics: []string{"tokens_per_s_per_rank", "scaling_efficiency"}}))
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rows))
	for _, r := range rows {
		want := any(nil)
		if r["id"] == noisy.Config.ID {
			want = "noisy"
		}
		assert.Equal(t, want, r["tokens_per_s_per_rank.marks"], r["id"])
	}

	// The export: the reasons in columns of their own.
	buf.Reset()
	require.NoError(t, WriteCSV(&buf, runs))
	recs, err = csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	byID = map[string][]string{}
	for _, r := range recs[1:] {
		byID[r[0]] = r
	}
	assert.Equal(t, noisy.Derived.Noise, byID[noisy.Config.ID][col("noise")])
	assert.Equal(t, "", byID[quiet.Config.ID][col("noise")])
	assert.Equal(t, quiet.Derived.ScalingEfficiencyNoise, byID[quiet.Config.ID][col("scaling_efficiency_noise")])
	buf.Reset()
	require.NoError(t, WriteJSON(&buf, runs))
	var exported []ExportedRun
	require.NoError(t, json.Unmarshal(buf.Bytes(), &exported))
	assert.Equal(t, noisy.Derived.Noise, exported[0].Derived.Noise)

	// A pivot marks its cells and says why as well.
	buf.Reset()
	require.NoError(t, Report(&buf, runs, ReportOptions{Rows: []string{"world_size"}, Cols: []string{"sharding"}}))
	assert.Contains(t, buf.String(), NoiseMark+" │")
	assert.Contains(t, buf.String(), noisy.Config.ID+": step times spread")
}

// TestNoiseQuietRunsUnmarked: the fixture's runs (steps within 3%, one repeat
// or six within 5%) and the sim's predictions carry no noise mark.
func TestNoiseQuietRunsUnmarked(t *testing.T) {
	for _, runs := range [][]Run{fixtureRuns(), quickstartRuns(t), {fullRun(t)}} {
		Derive(runs)
		for _, r := range runs {
			assert.Empty(t, r.Derived.Noise, r.Config.ID)
			assert.Empty(t, r.Derived.ScalingEfficiencyNoise, r.Config.ID)
		}
		var buf bytes.Buffer
		require.NoError(t, Report(&buf, runs, ReportOptions{}))
		assert.NotContains(t, buf.String(), "too noisy")
	}
}

// TestNoiseRepeatSpread: repeats that spread past ±NoisyRepeatSpread mark the
// run (half the range under six repeats, the interval's wider half from six);
// repeats within it do not.
func TestNoiseRepeatSpread(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	steady := func(scale float64) Result {
		return resultWithSteps(rc, 0.1*scale, 0.1*scale, 0.1*scale, 0.1*scale)
	}
	m := Normalize(rc, []Result{steady(1), steady(1.3), steady(0.8)})
	assert.Contains(t, Noise(&m), "tokens/s/rank over 3 repeats ±")
	assert.Contains(t, Noise(&m), "half their range; limit ±10%")
	m = Normalize(rc, []Result{steady(1), steady(1.02), steady(0.99)})
	assert.Empty(t, Noise(&m))
	var six []Result
	for _, s := range []float64{1, 1.3, 0.75, 1.1, 0.9, 1.25} {
		six = append(six, steady(s))
	}
	m = Normalize(rc, six)
	require.Contains(t, m.CI, SampleTokensPerSPerRank)
	assert.Contains(t, Noise(&m), "the 95% interval; limit ±10%")
	m.Status = StatusOOM
	assert.Empty(t, Noise(&m), "a run that is not ok has no figures to mark")
}

// TestProfilerOverheadResolved: the profiler's cost is shown only when every
// profiled step is beyond every measured one and enough steps make that
// unlikely by chance (issue 37: 5.28 on a busy run, −0.03 on quiet ones).
func TestProfilerOverheadResolved(t *testing.T) {
	quiet := []float64{0.098, 0.1, 0.101, 0.103, 0.1}
	busy := []float64{0.0039, 0.018, 0.020, 0.040, 0.087}
	for _, tt := range []struct {
		name               string
		profiled, measured []float64
		want               bool
	}{
		{"quiet steps, profiled 3% faster: inside the spread", []float64{0.097, 0.099, 0.0975}, quiet, false},
		{"quiet steps, profiled 50% slower", []float64{0.15, 0.149, 0.152}, quiet, true},
		{"busy steps, profiled 6.28× the median but inside the spread", []float64{0.020, 0.126, 0.2}, busy, false},
		{"busy steps, every profiled step slower than every measured one", []float64{0.12, 0.126, 0.2}, busy, true},
		{"too few steps to tell (2 / C(4, 1) = 50%)", []float64{0.2}, []float64{0.1, 0.1, 0.1}, false},
		{"none", nil, quiet, false},
	} {
		assert.Equal(t, tt.want, ProfilerOverheadResolved(tt.profiled, tt.measured), tt.name)
	}
}

// TestBenchfmtCarriesMarks: the benchfmt export gives a noisy or warned run's
// results the reason as file configuration (benchstat shows them under their
// own heading), and runs without marks none.
func TestBenchfmtCarriesMarks(t *testing.T) {
	noisy, quiet, runs := cpuStrategiesPair(t)
	runs[1].Metrics.Warnings = []string{"tokens counted\ntwice"}
	var buf bytes.Buffer
	require.NoError(t, WriteBenchfmt(&buf, runs))
	r := benchfmt.NewReader(&buf, "export.txt")
	configs := map[string]map[string]string{}
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		ws := res.GetConfig("sweep") + string(res.Name)
		configs[ws] = map[string]string{"noise": res.GetConfig("noise"), "warnings": res.GetConfig("warnings")}
	}
	require.NoError(t, r.Err())
	require.Len(t, configs, 2)
	for name, c := range configs {
		if strings.Contains(name, "world_size=1/") {
			assert.Equal(t, strings.Join(strings.Fields(noisy.Derived.Noise), " "), c["noise"])
			assert.Empty(t, c["warnings"])
			continue
		}
		assert.Empty(t, c["noise"], quiet.Config.ID)
		assert.Equal(t, "tokens counted twice", c["warnings"])
	}
}

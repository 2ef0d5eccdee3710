package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchmath"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// noisyRun is a run of the stats sweep with n repeats: tokens/s/rank scaled by speed
// times a random factor within ±noise, and peak reserved memory scaled by mem with a
// small random spread, so every figure has a sample benchstat can summarize.
func noisyRun(rng *rand.Rand, ws int, n int, speed, noise, mem float64) Run {
	rc := fixtureConfig(ws, sweeps.FullShard)
	rc.Sweep, rc.Repeats = "stats", n
	rc.AssignID()
	var reps []Result
	for i := 0; i < n; i++ {
		r := fixtureResult(rc)
		f := speed * (1 + noise*(2*rng.Float64()-1))
		r.MeasuredWallS /= f
		for s := range r.Steps {
			r.Steps[s].StepTimeS /= f
		}
		r.PeakMemReservedBytes = I64(int64(float64(*r.PeakMemReservedBytes) * mem * (1 + 0.002*rng.Float64())))
		reps = append(reps, r)
	}
	return Run{Config: rc, Metrics: Normalize(rc, reps)}
}

// statSides is a baseline and a current set of three runs with 8 repeats each: ws1
// 10% slower now, ws2 unchanged, ws4 4% faster and 3% more memory.
func statSides() (base, cur []Run) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ws := range []int{1, 2, 4} {
		base = append(base, noisyRun(rng, ws, 8, 1, 0.02, 1))
	}
	cur = []Run{noisyRun(rng, 1, 8, 0.9, 0.02, 1), noisyRun(rng, 2, 8, 1, 0.02, 1), noisyRun(rng, 4, 8, 1.04, 0.02, 1.03)}
	return base, cur
}

func TestCompareGolden(t *testing.T) {
	base, cur := statSides()
	cmp, err := Compare(base, cur, CompareOptions{BaselineName: "base", CurrentName: "new"})
	require.NoError(t, err)
	var table, md bytes.Buffer
	require.NoError(t, cmp.Write(&table, FormatTable))
	golden(t, "compare_stats_table", table.Bytes())
	require.NoError(t, cmp.Write(&md, FormatMarkdown))
	golden(t, "compare_stats_markdown", md.Bytes())

	// One repeat per side, an OOM, a missing and a new run: changes are marked as not
	// statistically backed, statuses stand in for figures.
	baseDir, curDir := gateTrees(t)
	b, err := LoadPath(baseDir)
	require.NoError(t, err)
	c, err := LoadPath(curDir)
	require.NoError(t, err)
	cmp, err = Compare(b, c, CompareOptions{BaselineName: "baseline", CurrentName: "current",
		Metrics: []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes"}})
	require.NoError(t, err)
	table.Reset()
	require.NoError(t, cmp.Write(&table, FormatTable))
	golden(t, "compare_nightly_table", table.Bytes())
	assert.Contains(t, table.String(), "was ok, now oom")
	assert.Contains(t, table.String(), notBackedNote)
}

func TestCompareGeomean(t *testing.T) {
	base, cur := statSides()
	cmp, err := Compare(base, cur, CompareOptions{Metrics: []string{"tokens_per_s_per_rank"}})
	require.NoError(t, err)
	g := cmp.Geomeans[0]
	require.Equal(t, 3, g.Runs)
	prod := 1.0
	for _, row := range cmp.Rows {
		d := row.Deltas[0]
		prod *= d.Current.Center / d.Baseline.Center
	}
	assert.InDelta(t, math.Pow(prod, 1.0/3)-1, *g.Change, 1e-12)
	assert.InDelta(t, *g.Current / *g.Baseline, 1+*g.Change, 1e-12, "same runs on both sides: ratio of geomeans")
}

func TestCompareRejectsTextMetrics(t *testing.T) {
	_, err := Compare(nil, nil, CompareOptions{Metrics: []string{"status"}})
	assert.ErrorContains(t, err, "is text")
	_, err = Compare(nil, nil, CompareOptions{Metrics: []string{"nope"}})
	assert.ErrorContains(t, err, "unknown metric or derived")
}

// benchstatUnits maps benchstat's units (WriteBenchfmt) to our metric names.
var benchstatUnits = map[string]string{
	"tokens/s/rank":   "tokens_per_s_per_rank",
	"sec/step":        "step_time_s.median",
	"mfu":             "mfu",
	"peak-reserved-B": "peak_mem_reserved_bytes",
}

// TestCompareAgreesWithBenchstat writes both sides in Go benchmark format, runs the
// real benchstat (golang.org/x/perf/cmd/benchstat, from the module proxy) on them,
// and checks that Compare finds the same centers, CIs, changes and p-values.
func TestCompareAgreesWithBenchstat(t *testing.T) {
	base, cur := statSides()
	dir := t.TempDir()
	files := map[string][]Run{"base.txt": base, "new.txt": cur}
	for name, runs := range files {
		var buf bytes.Buffer
		require.NoError(t, WriteBenchfmt(&buf, runs))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644))
	}
	cmd := exec.Command("go", "run", "golang.org/x/perf/cmd/benchstat", "-format", "csv",
		filepath.Join(dir, "base.txt"), filepath.Join(dir, "new.txt"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "benchstat: %s", stderr.String())

	metrics := []string{"tokens_per_s_per_rank", "step_time_s.median", "mfu", "peak_mem_reserved_bytes"}
	cmp, err := Compare(base, cur, CompareOptions{Metrics: metrics})
	require.NoError(t, err)
	// Read Compare through its JSON, as a user of `fsdpbench compare --format json` would.
	var js bytes.Buffer
	require.NoError(t, cmp.Write(&js, FormatJSON))
	var got Comparison
	require.NoError(t, json.Unmarshal(js.Bytes(), &got))
	metricIndex := map[string]int{}
	for j, m := range got.Metrics {
		metricIndex[m] = j
	}
	rowOf := map[int]ComparisonRow{}
	for _, row := range got.Rows {
		ws, err := strconv.Atoi(regexp.MustCompile(`^ws(\d+)-`).FindStringSubmatch(row.Run)[1])
		require.NoError(t, err)
		rowOf[ws] = row
	}

	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	require.NoError(t, err)
	wsName := regexp.MustCompile(`(?:^|/)world_size=(\d+)(?:/|$)`)
	unit, checked, geomeans := "", 0, 0
	for _, rec := range recs {
		if len(rec) >= 3 && rec[2] == "CI" {
			unit = rec[1]
			continue
		}
		metric, ok := benchstatUnits[unit]
		if !ok || len(rec) < 7 || rec[0] == "" {
			continue
		}
		j := metricIndex[metric]
		if rec[0] == "geomean" {
			g := got.Geomeans[j]
			require.NotNil(t, g.Change, metric)
			assert.InEpsilon(t, parseF(t, rec[1]), *g.Baseline, 1e-9, "%s geomean", metric)
			assert.InEpsilon(t, parseF(t, rec[3]), *g.Current, 1e-9, "%s geomean", metric)
			assert.Equal(t, rec[5], fmt.Sprintf("%+.2f%%", *g.Change*100), "%s geomean change", metric)
			geomeans++
			continue
		}
		m := wsName.FindStringSubmatch(rec[0])
		require.NotNil(t, m, "benchstat row %q names no world_size", rec[0])
		ws, _ := strconv.Atoi(m[1])
		row, ok := rowOf[ws]
		require.True(t, ok, "benchstat row %q has no run in compare", rec[0])
		d := row.Deltas[j]
		require.True(t, d.Backed, "%s ws%d: 8 repeats a side are enough", metric, ws)
		what := fmt.Sprintf("%s ws%d", metric, ws)
		assert.InEpsilon(t, parseF(t, rec[1]), d.Baseline.Center, 1e-9, "%s baseline center", what)
		assert.InEpsilon(t, parseF(t, rec[3]), d.Current.Center, 1e-9, "%s current center", what)
		assert.Equal(t, rec[2], pct(d.Baseline), "%s baseline CI", what)
		assert.Equal(t, rec[4], pct(d.Current), "%s current CI", what)
		want := "~"
		if d.Significant {
			want = fmt.Sprintf("%+.2f%%", *d.Change*100)
		}
		assert.Equal(t, rec[5], want, "%s change", what)
		p := ""
		if *d.P != 0 {
			p = fmt.Sprintf("p=%.3f ", *d.P)
		}
		assert.Equal(t, rec[6], fmt.Sprintf("%sn=%d", p, d.Baseline.N), "%s p-value", what)
		checked++
	}
	assert.Equal(t, 12, checked, "3 runs x 4 units compared:\n%s", out)
	assert.Equal(t, 4, geomeans)

	// The statistics the comparison rests on are known: ws1 is slower, ws2 is not.
	assert.True(t, rowOf[1].Deltas[metricIndex["tokens_per_s_per_rank"]].Significant)
	assert.False(t, rowOf[2].Deltas[metricIndex["tokens_per_s_per_rank"]].Significant)
}

func pct(s *SideStat) string {
	return benchmath.Summary{Center: s.Center, Lo: s.Lo, Hi: s.Hi}.PctRangeString()
}

func parseF(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	require.NoError(t, err, "%q", s)
	return v
}

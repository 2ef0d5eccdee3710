package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// drawWarning draws a warning text with what breaks naive exports: commas,
// quotes, a newline, a list-like bracket, non-ASCII.
func drawWarning(t *rapid.T, label string) string {
	return rapid.SampledFrom([]string{
		"tokens counted twice",
		`the script printed "tokens per iteration will be: 64", not 128`,
		"line one\nline two",
		"[not, a list]",
		"µs ≠ ms; ±5%",
	}).Draw(t, label)
}

// drawExportRuns draws a set of runs as a sweep stores them: configs across the
// world size, sharding, checkpointing, env and backend options; each run
// normalized from one to seven repeats whose steps are steady or noisy, some
// with warnings, some out of memory; then Derive.
func drawExportRuns(t *rapid.T) []Run {
	n := rapid.IntRange(1, 6).Draw(t, "runs")
	// The set's own checkpointing, env and options, which a run keeps three
	// times in four, so that runs of one config at several world sizes form.
	ckpt := rapid.Bool().Draw(t, "checkpoint")
	omp := rapid.SampledFrom([]string{"", "1", "2"}).Draw(t, "env.OMP_NUM_THREADS")
	opts := rapid.Bool().Draw(t, "backend_options")
	var runs []Run
	seen := map[string]bool{}
	for i := range n {
		ws := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, fmt.Sprintf("run%d.world_size", i))
		rc := fixtureConfig(ws, rapid.SampledFrom([]string{sweeps.FullShard, sweeps.NoShard, sweeps.DDP}).Draw(t, fmt.Sprintf("run%d.sharding", i)))
		rc.Steps = 8
		ckpt, omp, opts := ckpt, omp, opts
		if rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("run%d.own", i)) == 0 {
			ckpt, opts = !ckpt, !opts
			omp = rapid.SampledFrom([]string{"", "1", "2"}).Draw(t, fmt.Sprintf("run%d.env.OMP_NUM_THREADS", i))
		}
		if ckpt {
			rc.Checkpoint, rc.CheckpointEvery, rc.ResumeCheck = sweeps.CheckpointSharded, 2, true
		}
		if omp != "" {
			rc.Env = map[string]string{"OMP_NUM_THREADS": omp}
		}
		if opts {
			rc.BackendOptions = map[string]any{"transport": "shm", "efficiency": 0.5}
		}
		rc.AssignID()
		if seen[rc.ID] {
			continue
		}
		seen[rc.ID] = true
		repeats := rapid.IntRange(1, 7).Draw(t, fmt.Sprintf("run%d.repeats", i))
		noisy := rapid.Bool().Draw(t, fmt.Sprintf("run%d.noisy", i))
		var res []Result
		for r := range repeats {
			k := rapid.IntRange(2, rc.Steps).Draw(t, fmt.Sprintf("run%d.repeat%d.steps", i, r))
			var steps []float64
			for s := range k {
				x := 0.01 * (1 + 0.01*float64(s))
				if noisy {
					x = rapid.Float64Range(0.001, 0.1).Draw(t, fmt.Sprintf("run%d.repeat%d.step%d", i, r, s))
				}
				steps = append(steps, x)
			}
			one := resultWithSteps(rc, steps...)
			one.Started = time.Date(2026, 11, 28, 20, r, 0, 0, time.UTC)
			one.Finished = one.Started.Add(time.Second)
			one.PeakMemReservedBytes = I64(int64(rapid.IntRange(1, 80).Draw(t, fmt.Sprintf("run%d.repeat%d.gib", i, r))) << 30)
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("run%d.repeat%d.warned", i, r)) == 0 {
				one.Warnings = []string{drawWarning(t, fmt.Sprintf("run%d.repeat%d.warning", i, r))}
			}
			if r == 0 && rapid.IntRange(0, 7).Draw(t, fmt.Sprintf("run%d.oom", i)) == 0 {
				one.Status, one.Error, one.Steps, one.MeasuredWallS = StatusOOM, "CUDA out of memory", nil, 0
			}
			res = append(res, one)
		}
		runs = append(runs, Run{Config: rc, Metrics: Normalize(rc, res)})
	}
	Derive(runs)
	return runs
}

// TestPropertyExportRereadPreservesFiguresAndMarks: over drawn runs (noisy or
// not, warned or not), what the CSV export holds re-reads as every figure
// (floats bit for bit) and every mark (noise reasons, warnings, the derived
// figures' marks); the JSON export re-read with ReadJSON gives back the runs,
// and deriving again from them gives the same derived figures and marks; and
// a report's CSV of the re-read runs is the report's CSV of the originals,
// .marks columns included. rapid prints the smallest set of runs that breaks it.
func TestPropertyExportRereadPreservesFiguresAndMarks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		runs := drawExportRuns(t)

		var buf bytes.Buffer
		if err := WriteCSV(&buf, runs); err != nil {
			t.Fatalf("WriteCSV: %v", err)
		}
		recs, err := csv.NewReader(&buf).ReadAll()
		if err != nil {
			t.Fatalf("re-read CSV: %v", err)
		}
		cols := append(Columns(), DynamicColumns(runs)...)
		if len(recs) != len(runs)+1 || len(recs[0]) != len(cols) {
			t.Fatalf("CSV has %d rows of %d cells for %d runs and %d columns", len(recs), len(recs[0]), len(runs), len(cols))
		}
		for i := range runs {
			r := &runs[i]
			for j, c := range cols {
				cell, v := recs[i+1][j], c.Value(r)
				if recs[0][j] != c.Name {
					t.Fatalf("CSV column %d is %q, want %q", j, recs[0][j], c.Name)
				}
				switch x := v.(type) {
				case nil:
					if cell != "" {
						t.Fatalf("%s %s: unknown, but the CSV holds %q", r.Config.ID, c.Name, cell)
					}
				case float64:
					back, err := strconv.ParseFloat(cell, 64)
					if err != nil || back != x {
						t.Fatalf("%s %s: %v re-read as %q (%v)", r.Config.ID, c.Name, x, cell, err)
					}
				default:
					if cell != plainValue(v) {
						t.Fatalf("%s %s: %v re-read as %q", r.Config.ID, c.Name, v, cell)
					}
				}
			}
			var ws []string
			if cell := recs[i+1][slices.Index(recs[0], "warnings")]; cell != "" {
				if err := json.Unmarshal([]byte(cell), &ws); err != nil {
					t.Fatalf("%s warnings %q: %v", r.Config.ID, cell, err)
				}
			}
			if !reflect.DeepEqual(ws, r.Metrics.Warnings) {
				t.Fatalf("%s: warnings %q re-read as %q", r.Config.ID, r.Metrics.Warnings, ws)
			}
			if got := recs[i+1][slices.Index(recs[0], "noise")]; got != r.Derived.Noise {
				t.Fatalf("%s: noise %q re-read as %q", r.Config.ID, r.Derived.Noise, got)
			}
		}

		buf.Reset()
		if err := WriteJSON(&buf, runs); err != nil {
			t.Fatalf("WriteJSON: %v", err)
		}
		back, err := ReadJSON(&buf)
		if err != nil {
			t.Fatalf("ReadJSON: %v", err)
		}
		if len(back) != len(runs) {
			t.Fatalf("%d runs re-read as %d", len(runs), len(back))
		}
		for i := range runs {
			a, b := runs[i], back[i]
			if !reflect.DeepEqual(a.Metrics, b.Metrics) {
				t.Fatalf("%s: metrics re-read differ:\nwrote %+v\nread  %+v", a.Config.ID, a.Metrics, b.Metrics)
			}
			if !reflect.DeepEqual(a.Derived, b.Derived) {
				t.Fatalf("%s: derived re-read differ:\nwrote %+v\nread  %+v", a.Config.ID, a.Derived, b.Derived)
			}
			if a.Config.ID != b.Config.ID || !reflect.DeepEqual(a.Config.Env, b.Config.Env) || a.Config.Checkpoint != b.Config.Checkpoint {
				t.Fatalf("%s: config re-read differs: %+v", a.Config.ID, b.Config)
			}
		}
		Derive(back)
		for i := range runs {
			if !reflect.DeepEqual(runs[i].Derived, back[i].Derived) {
				t.Fatalf("%s: derived again from the re-read runs:\nwrote %+v\nnow   %+v", runs[i].Config.ID, runs[i].Derived, back[i].Derived)
			}
		}

		var want, got bytes.Buffer
		opt := ReportOptions{Format: FormatCSV, Metrics: []string{"tokens_per_s_per_rank", "step_time_s.median", "mfu",
			"peak_mem_reserved_bytes", "scaling_efficiency", "memory_saving"}}
		if err := Report(&want, runs, opt); err != nil {
			t.Fatalf("report: %v", err)
		}
		if err := Report(&got, back, opt); err != nil {
			t.Fatalf("report of the re-read runs: %v", err)
		}
		if want.String() != got.String() {
			t.Fatalf("report CSV differs after re-reading:\nwrote\n%s\nread\n%s", want.String(), got.String())
		}
		for i := range runs {
			if runs[i].Derived.Noise != "" && runs[i].Metrics.Status == StatusOK && !bytes.Contains(want.Bytes(), []byte("tokens_per_s_per_rank.marks")) {
				t.Fatalf("%s is noisy but the report CSV has no marks column:\n%s", runs[i].Config.ID, want.String())
			}
		}
	})
}

package results

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// fullRun is a run with every figure known, so every column has a value.
func fullRun(t *testing.T) Run {
	t.Helper()
	rc := fixtureConfig(2, sweeps.FullShard)
	rc.BackendOptions = map[string]any{"threads": 2}
	rc.Checkpoint, rc.CheckpointEvery, rc.ResumeCheck = sweeps.CheckpointSharded, 5, true
	var repeats []Result
	for i := 0; i < 6; i++ {
		r := fixtureResult(rc)
		r.MeasuredWallS *= 1 + 0.01*float64(i)
		r.PeakDeviceMemBytes, r.PeakRSSBytes, r.DeviceMemBytes = I64(20<<30), I64(3<<30), I64(80<<30)
		r.CommBytesPerStep = &CommBytes{AllGather: 1 << 20, ReduceScatter: 1 << 20, AllReduce: 0, InterNode: I64(1 << 19)}
		r.MemBreakdownBytes = map[string]int64{"params": 1 << 28, "grads": 1 << 28, "optimizer": 3 << 28, "activations": 1 << 30}
		r.Started = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Minute)
		r.Finished = r.Started.Add(30 * time.Second)
		r.CheckpointSaveS, r.CheckpointLoadS = F64(0.5+0.01*float64(i)), F64(0.25)
		r.CheckpointBytes, r.CheckpointBytesPerRank, r.ResumeExact = I64(6<<30), I64(3<<30), &[]bool{true}[0]
		exposed := 0.02 + 0.001*float64(i)
		r.StepBreakdown = &StepBreakdown{StepS: 0.1 + exposed, ComputeS: 0.09, CollectiveS: 0.05,
			AllGatherS: F64(0.03), ReduceScatterS: F64(0.02), AllReduceS: F64(0), ExposedCommS: exposed, OtherS: 0.01, Source: "gotrain"}
		r.Env.Machine = &Machine{Repeats: 1, CPUs: 16, Load1: F64(2 + 0.1*float64(i)), OtherCPUShare: F64(0.02 * float64(i)),
			CPUMHz: F64(2400), GPUOtherProcesses: &[]int{i % 2}[0], GPUSMClockMHz: F64(1980 - float64(i)),
			GPUThrottledShare: F64(0), GPUThrottle: []string{"sw_power_cap"}}
		repeats = append(repeats, r)
	}
	base := fixtureConfig(2, sweeps.NoShard)
	base.BackendOptions = rc.BackendOptions
	base.Checkpoint, base.CheckpointEvery, base.ResumeCheck = rc.Checkpoint, rc.CheckpointEvery, rc.ResumeCheck
	runs := []Run{{Config: rc, Metrics: Normalize(rc, repeats)}, {Config: base}}
	runs[1].Metrics = Normalize(runs[1].Config, []Result{fixtureResult(runs[1].Config)})
	Derive(runs)
	// Fill in what an ok, measured run alone at its world size lacks, for the path check.
	runs[0].Derived.ScalingEfficiency, runs[0].Derived.ScalingBaseline = F64(1), rc.ID
	runs[0].Metrics.Error, runs[0].Metrics.Predicted, runs[0].Metrics.WholeRunWallTime = "a note", true, true
	return runs[0]
}

// lookupPath follows a dotted path through decoded JSON.
func lookupPath(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, part := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func decode(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	return doc
}

func TestColumnNamesAreJSONPaths(t *testing.T) {
	r := fullRun(t)
	// The marks a run has when noisy and warned, so that their columns have values.
	r.Metrics.Warnings = []string{"a warning, with a comma"}
	r.Derived.Noise, r.Derived.ScalingEfficiencyNoise = "step times spread", "scaling: step times spread"
	r.Derived.ScalingEfficiencyWarned, r.Derived.MemorySavingWarned = true, true
	docs := map[ColumnKind]map[string]any{KindID: decode(t, r.Config), KindAxis: decode(t, r.Config),
		KindMetric: decode(t, r.Metrics), KindDerived: decode(t, r.Derived)}
	seen := map[string]bool{}
	lastKind := KindID
	for _, c := range Columns() {
		assert.False(t, seen[c.Name], "duplicate column %s", c.Name)
		seen[c.Name] = true
		assert.GreaterOrEqual(t, c.Kind, lastKind, "%s: columns are grouped by kind, in order", c.Name)
		lastKind = c.Kind
		assert.NotEmpty(t, c.Header, c.Name)
		assert.NotEmpty(t, c.Doc, c.Name)

		want, ok := lookupPath(docs[c.Kind], c.Name)
		require.True(t, ok, "column %s is not a JSON path of the %s record", c.Name, c.Kind)
		got := c.Value(&r)
		require.NotNil(t, got, "column %s: no value in a fully known run", c.Name)
		switch g := got.(type) {
		case string:
			if c.Name == "backend_options" || c.Name == "warnings" { // JSON in a cell
				b, _ := json.Marshal(want)
				assert.JSONEq(t, string(b), g)
				continue
			}
			if c.Name == "env.machine.gpu_throttle" { // a list in metrics.json, words in a cell
				assert.Equal(t, want, []any{g}, c.Name)
				continue
			}
			assert.Equal(t, want, g, c.Name)
		case bool:
			assert.Equal(t, want, g, c.Name)
		case int64:
			if c.Name == "resume_exact" { // a flag in metrics.json, 1 or 0 for gates
				assert.Equal(t, want, g == 1, c.Name)
				continue
			}
			assert.InDelta(t, want, float64(g), 0, c.Name)
		case float64:
			assert.InDelta(t, want, g, 0, c.Name)
		default:
			t.Errorf("column %s: value of type %T; want string, bool, int64 or float64", c.Name, got)
		}
	}
}

func TestColumnText(t *testing.T) {
	r := fixtureRuns()[0]
	tests := []struct{ column, text, plain string }{
		{"peak_mem_reserved_bytes", "18.0 GiB", "19327352832"},
		{"memory_saving", "0.0", "0"},
		{"sharding", "full_shard", "full_shard"},
		{"world_size", "1", "1"},
		{"peak_device_mem_bytes", "-", ""},
	}
	for _, tt := range tests {
		c, err := LookupColumn(tt.column)
		require.NoError(t, err)
		assert.Equal(t, tt.text, c.Text(&r), tt.column)
		assert.Equal(t, tt.plain, c.Plain(&r), tt.column)
	}
}

func TestColumnUnknownIsNil(t *testing.T) {
	r := Run{Config: fixtureConfig(1, sweeps.FullShard), Metrics: Metrics{Status: StatusOK}}
	for _, c := range ColumnsOf(KindMetric) {
		switch c.Name {
		case "status", "predicted", "whole_run_wall_time": // flags: false is known
			assert.NotNil(t, c.Value(&r), c.Name)
		default:
			assert.Nil(t, c.Value(&r), "%s: unknown must be nil, never a zero", c.Name)
		}
	}
	for _, c := range ColumnsOf(KindDerived) {
		assert.Nil(t, c.Value(&r), c.Name)
	}
}

func TestLookupColumn(t *testing.T) {
	c, err := LookupColumn("tokens_per_s_per_rank")
	require.NoError(t, err)
	assert.Equal(t, "tokens/s/rank", c.Header)

	_, err = LookupColumn("world_size", KindMetric, KindDerived)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown metric or derived "world_size"`)
	assert.Contains(t, err.Error(), "tokens_per_s_per_rank")
	assert.NotContains(t, err.Error(), "batch_per_device")

	_, err = LookupColumn("wrld_size", KindAxis)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "world_size")
}

func TestCSVHeader(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, nil))
	golden(t, "csv_header", buf.Bytes())
}

// TestColumnsDocOrder keeps the order written in Columns' doc comment the order of
// the registry.
func TestColumnsDocOrder(t *testing.T) {
	src, err := os.ReadFile("columns.go")
	require.NoError(t, err)
	_, doc, ok := strings.Cut(string(src), "// tables follow:\n//\n")
	require.True(t, ok)
	doc, _, ok = strings.Cut(doc, "\n//\n")
	require.True(t, ok)
	var names []string
	for _, f := range strings.Fields(strings.ReplaceAll(doc, "//", "")) {
		if !strings.HasSuffix(f, ":") {
			names = append(names, f)
		}
	}
	var want []string
	for _, c := range Columns() {
		want = append(want, c.Name)
	}
	assert.Equal(t, want, names)
}

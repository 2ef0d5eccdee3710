package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// fuzzSweep writes a sweep of three fixture runs (one ok at ws1, one ok at ws2, one
// oom) and returns it with the first run's ID.
func fuzzSweep(t testing.TB) (*SweepDir, string) {
	t.Helper()
	sd, err := OpenSweep(filepath.Join(t.TempDir(), "fuzz"))
	require.NoError(t, err)
	var first string
	for _, rc := range []sweeps.RunConfig{fixtureConfig(1, sweeps.FullShard), fixtureConfig(2, sweeps.FullShard), fixtureConfig(4, sweeps.NoShard)} {
		storeRun(t, sd, rc)
		if first == "" {
			first = rc.ID
		}
	}
	return sd, first
}

// reportAll renders runs through every reporter and the gate; any error is a bug,
// since the runs passed Load.
func reportAll(t *testing.T, runs []Run) {
	t.Helper()
	require.NoError(t, WriteJSON(io.Discard, runs))
	require.NoError(t, WriteCSV(io.Discard, runs))
	require.NoError(t, WriteBenchfmt(io.Discard, runs))
	for _, f := range Formats {
		require.NoError(t, Report(io.Discard, runs, ReportOptions{Format: f}), f)
	}
	rules, err := ParseRules(append([]string{"mfu>=0.001", "loss_last<=100"}, DefaultRules...), "--rule")
	require.NoError(t, err)
	g, err := Gate(runs, runs, GateOptions{Rules: rules})
	require.NoError(t, err)
	for _, f := range GateFormats {
		require.NoError(t, g.Write(io.Discard, f), f)
	}
	cmp, err := Compare(runs, runs, CompareOptions{})
	require.NoError(t, err)
	require.NoError(t, cmp.Write(io.Discard, FormatJSON))
}

// FuzzLoadMetrics: whatever a run's metrics.json holds, Load refuses it naming the
// file, or loads runs that every reporter renders (no +Inf, no unencodable JSON).
func FuzzLoadMetrics(f *testing.F) {
	rc := fixtureConfig(1, sweeps.FullShard)
	good, err := json.MarshalIndent(Normalize(rc, []Result{fixtureResult(rc)}), "", "  ")
	require.NoError(f, err)
	f.Add(good)
	for _, s := range []string{`{}`, `null`, `[]`, `{"status":"banana","world_size":1}`, `{"status":"ok","world_size":0}`,
		`{"status":"ok","world_size":-3}`, `{"status":"ok","world_size":1,"tokens_per_s":1e308,"tokens_per_s_per_rank":1e308}`,
		`{"status":"ok","world_size":1,"tokens_per_s_per_rank":1e-300}`,
		`{"status":"ok","world_size":1,"step_time_s":{"median":-1,"p10":-1,"p90":-1}}`,
		`{"status":"ok","world_size":1,"peak_mem_reserved_bytes":-9223370500853066752}`,
		`{"status":"ok","world_size":1,"mem_breakdown_bytes":{"params":9e18,"grads":9e18,"optimizer":9e18}}`,
		`{"status":"ok","world_size":1,"samples":{"mfu":[1e308,-1e308]}}`,
		`{"status":"ok","world_size":2,"repeats":3,"samples":{"tokens_per_s_per_rank":[1,2,3]}}`} {
		f.Add([]byte(s))
	}
	// One sweep per fuzzing process, its first metrics.json rewritten each time: a
	// fresh sweep per input would spend the time in fsync.
	sd, id := fuzzSweep(f)
	path := filepath.Join(sd.RunDir(id), MetricsFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		require.NoError(t, os.WriteFile(path, data, 0o644))
		runs, err := Load(sd.Path)
		if err != nil {
			assert.Contains(t, err.Error(), path, "the error names the file")
			assert.Less(t, len(err.Error()), 2000+len(path), "an error does not echo the file whole")
			return
		}
		for i := range runs {
			require.NoError(t, CheckRun(&runs[i]))
		}
		reportAll(t, runs)
	})
}

// FuzzIndexLine: whatever index.jsonl holds, Load gives what the run directories
// say: the cache never outranks the files it caches.
func FuzzIndexLine(f *testing.F) {
	sd, _ := fuzzSweep(f)
	lines, err := os.ReadFile(filepath.Join(sd.Path, IndexFile))
	require.NoError(f, err)
	f.Add(lines)
	for _, l := range bytes.Split(lines, []byte{'\n'}) {
		f.Add(l)
		f.Add(bytes.Replace(l, []byte(`"status":"ok"`), []byte(`"status":"banana"`), 1))
		f.Add(bytes.Replace(l, []byte(`"tokens_per_s_per_rank":`), []byte(`"tokens_per_s_per_rank":9`), 1))
	}
	f.Add([]byte(`{"id":"x","metrics":null,"config":null}`))
	f.Add([]byte("{\"id\":\"\x00\"}\n\n{"))
	require.NoError(f, os.Remove(filepath.Join(sd.Path, IndexFile)))
	want, err := Load(sd.Path)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, index []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(sd.Path, IndexFile), index, 0o644))
		got, err := Load(sd.Path)
		require.NoError(t, err, "the index is a cache: a bad one is never an error")
		require.Equal(t, want, got)
	})
}

// FuzzLoadPathJSON: a file given as a side of gate or compare is refused with its
// name, or gives runs that every reporter renders.
func FuzzLoadPathJSON(f *testing.F) {
	rc := fixtureConfig(1, sweeps.FullShard)
	var buf bytes.Buffer
	require.NoError(f, WriteJSON(&buf, []Run{{Config: rc, Metrics: Normalize(rc, []Result{fixtureResult(rc)})}}))
	f.Add(buf.Bytes())
	for _, s := range []string{`[]`, `null`, `{}`, `[{}]`, `[{"config":{"id":"a"},"metrics":{"status":"ok","world_size":1}},{"config":{"id":"a"},"metrics":{"status":"ok","world_size":1}}]`,
		`[{"config":{"id":"a"},"metrics":{"status":"ok","world_size":1},"derived":{"scaling_efficiency":1e308}}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "side.json")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		runs, err := LoadPath(path)
		if err != nil {
			assert.Contains(t, err.Error(), path)
			var ie *InvalidRunError
			if errors.As(err, &ie) {
				assert.NotEmpty(t, ie.Field)
			}
			return
		}
		reportAll(t, runs)
	})
}

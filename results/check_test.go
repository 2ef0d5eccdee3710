package results

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// editJSON rewrites the JSON object in path through edit (nil deletes a key).
func editJSON(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
}

func TestLoadRefusesInvalidRuns(t *testing.T) {
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	raw := func(s string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o644)) }
	}
	edit := func(f func(map[string]any)) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { editJSON(t, path, f) }
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, path string) // on the run's metrics.json
		want   string
	}{
		{"empty object", raw("{}\n"), "status is missing"},
		{"null", raw("null\n"), "status is missing"},
		{"no status", edit(func(m map[string]any) { delete(m, "status") }), "status is missing"},
		{"unknown status", edit(set("status", "banana")), `status "banana" is not a run status`},
		{"world size 0", edit(set("world_size", 0)), "world_size 0 is not between 1"},
		{"world size negative", edit(set("world_size", -4)), "world_size -4 is not between 1"},
		{"negative step time", edit(set("step_time_s", map[string]any{"median": -0.1, "p10": -0.2, "p90": 0.1})), "step_time_s.p10 -0.2 is not between"},
		{"zero step time", edit(set("step_time_s", map[string]any{"median": 0, "p10": 0, "p90": 0})), "step_time_s.p10 0 is not between"},
		{"more steps than configured", edit(set("steps_measured", 3_000_000)), "steps_measured 3000000 is not between 0 and the 4 steps configured"},
		{"negative peak", edit(set("peak_mem_reserved_bytes", -9223370500853066752)), "peak_mem_reserved_bytes -9223370500853066752 is not between 0"},
		{"extreme throughput", edit(func(m map[string]any) { m["tokens_per_s"], m["tokens_per_s_per_rank"] = 1e308, 1e308 }), "tokens_per_s 1e+308 is not between 0 and 1e+13"},
		{"tokens per rank inconsistent", edit(set("tokens_per_s", 1.0)), "is not tokens_per_s_per_rank"},
		{"foreign run id", edit(set("run_id", "someone-else")), `run_id "someone-else" is not the run's ID`},
		{"rank outside the world", edit(set("per_rank", []any{map[string]any{"rank": 7}})), "per_rank[0].rank 7 is not a rank of world_size 1"},
		{"MFU far beyond 1", edit(set("mfu", 1e6)), "mfu 1e+06 is not between 0 and 100"},
		{"samples that disagree with the headline", edit(func(m map[string]any) {
			m["repeats"], m["samples"] = 3, map[string]any{"tokens_per_s_per_rank": []any{1, 2, 3}}
		}), "is not the median 2 of its samples"},
		{"more samples than repeats", edit(set("samples", map[string]any{"mfu": []any{1, 2, 3}})), "samples.mfu has 3 values for 1 repeats"},
		{"world size other than configured", edit(set("world_size", 2)), "world_size 2 is not the run's world_size 1 (run_args.json)"},
		{"reversed CI", edit(set("ci", map[string]any{"mfu": map[string]any{"center": 1, "lo": 2, "hi": 0}})), "ci.mfu is not an interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, rcs := fixtureSweep(t)
			path := filepath.Join(sd.RunDir(rcs[0].ID), MetricsFile)
			tt.damage(t, path)
			for _, load := range []func(string) ([]Run, error){Load, LoadPath} {
				_, err := load(sd.Path)
				require.Error(t, err)
				assert.Contains(t, err.Error(), path, "the error names the file")
				assert.Contains(t, err.Error(), tt.want)
				var ie *InvalidRunError
				assert.ErrorAs(t, err, &ie)
			}
			// The index holds the run as it was: it must not hide the bad file.
			require.FileExists(t, filepath.Join(sd.Path, IndexFile))
		})
	}
}

func TestLoadRefusesForeignRunDirectories(t *testing.T) {
	t.Run("run_args id differs from its directory", func(t *testing.T) {
		sd, rcs := fixtureSweep(t)
		path := filepath.Join(sd.RunDir(rcs[0].ID), RunArgsFile)
		editJSON(t, path, func(m map[string]any) { m["id"] = rcs[1].ID })
		_, err := Load(sd.Path)
		require.Error(t, err)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), `id "`+rcs[1].ID+`" is not the name of its directory "`+rcs[0].ID+`"`)
	})
	t.Run("symlinked run directory", func(t *testing.T) {
		sd, _ := fixtureSweep(t)
		other, err := OpenSweep(filepath.Join(t.TempDir(), "other"))
		require.NoError(t, err)
		rc := fixtureConfig(8, sweeps.FullShard)
		storeRun(t, other, rc)
		link := sd.RunDir(rc.ID)
		require.NoError(t, os.Symlink(other.RunDir(rc.ID), link))
		_, err = Load(sd.Path)
		require.Error(t, err)
		assert.Contains(t, err.Error(), link+": is a symbolic link; a run directory must be a real directory of its sweep")
	})
	t.Run("symlinked sweep directory", func(t *testing.T) {
		root := t.TempDir()
		sd, err := OpenSweep(filepath.Join(root, "real"))
		require.NoError(t, err)
		storeRun(t, sd, fixtureConfig(1, sweeps.FullShard))
		results := filepath.Join(root, "results")
		require.NoError(t, os.MkdirAll(results, 0o755))
		_, err = OpenSweep(filepath.Join(results, "here"))
		require.NoError(t, err)
		require.NoError(t, os.Symlink(sd.Path, filepath.Join(results, "linked")))
		_, err = Load(results)
		require.Error(t, err)
		assert.Contains(t, err.Error(), filepath.Join(results, "linked")+": is a symbolic link to a sweep")
	})
}

// TestLoadIndexNeverOutranksFiles: an index line that says something else than the
// run's files, even with their size and modification time, loses to the files.
func TestLoadIndexNeverOutranksFiles(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, sd *SweepDir, rc sweeps.RunConfig)
	}{
		{"metrics.json edited, same size and time", func(t *testing.T, sd *SweepDir, rc sweeps.RunConfig) {
			path := filepath.Join(sd.RunDir(rc.ID), MetricsFile)
			st, err := os.Stat(path)
			require.NoError(t, err)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			i := bytes.Index(b, []byte(`"loss_last": `))
			require.Positive(t, i)
			j := i + len(`"loss_last": `)
			if b[j] == '2' { // another first digit: the same size, another figure
				b[j] = '3'
			} else {
				b[j] = '2'
			}
			require.NoError(t, os.WriteFile(path, b, 0o644))
			require.NoError(t, os.Chtimes(path, st.ModTime(), st.ModTime()))
		}},
		{"forged line with the file's size and time", func(t *testing.T, sd *SweepDir, rc sweeps.RunConfig) {
			lines := indexLines(t, sd)
			var e indexLine
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &e))
			require.Equal(t, rc.ID, e.ID)
			e.Metrics.TokensPerSPerRank = F64(*e.Metrics.TokensPerSPerRank * 2)
			e.Metrics.TokensPerS = F64(*e.Metrics.TokensPerS * 2)
			b, err := json.Marshal(e)
			require.NoError(t, err)
			f, err := os.OpenFile(filepath.Join(sd.Path, IndexFile), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write(append(b, '\n'))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{"forged line with another config", func(t *testing.T, sd *SweepDir, rc sweeps.RunConfig) {
			var e indexLine
			require.NoError(t, json.Unmarshal([]byte(indexLines(t, sd)[0]), &e))
			e.Config.Sharding = sweeps.ShardGradOp
			b, err := json.Marshal(e)
			require.NoError(t, err)
			f, err := os.OpenFile(filepath.Join(sd.Path, IndexFile), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write(append(b, '\n'))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, rcs := fixtureSweep(t)
			before, err := Load(sd.Path)
			require.NoError(t, err)
			tt.damage(t, sd, rcs[0])
			runs, err := Load(sd.Path)
			require.NoError(t, err)
			assert.Equal(t, loadScan(t, sd.Path), runs, "Load must agree with the run directories")
			if tt.name != "metrics.json edited, same size and time" {
				assert.Equal(t, before, runs, "the forged line changed nothing")
			} else {
				assert.NotEqual(t, before, runs, "the edit is seen")
			}
		})
	}
}

func TestWriteMetricsRefusesInvalid(t *testing.T) {
	sd, err := OpenSweep(filepath.Join(t.TempDir(), "s"))
	require.NoError(t, err)
	rc := fixtureConfig(2, sweeps.FullShard)
	require.NoError(t, sd.WriteRunArgs(rc))
	res := fixtureResult(rc)
	for len(res.Steps) < 3_000_000 {
		res.Steps = append(res.Steps, res.Steps[0])
	}
	m := Normalize(rc, []Result{res})
	err = sd.WriteMetrics(rc.ID, m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "steps_measured")
	assert.Contains(t, err.Error(), rc.ID)
	assert.NoFileExists(t, filepath.Join(sd.RunDir(rc.ID), MetricsFile))

	// What the harness stores instead: the run failed, with the reason, no figures.
	bad := InvalidMetrics(rc, m, err)
	require.NoError(t, sd.WriteMetrics(rc.ID, bad))
	runs, err := Load(sd.Path)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, StatusFailed, runs[0].Metrics.Status)
	assert.Contains(t, runs[0].Metrics.Error, "steps_measured 3000000 is not between 0 and the 4 steps configured")
	assert.Nil(t, runs[0].Metrics.TokensPerS)
}

func TestCheckMetricsAcceptsNormalizedRuns(t *testing.T) {
	for i := range 400 {
		rc, m := synthRun("synth", i)
		require.NoError(t, CheckMetrics(&rc, &m), "run %d", i)
	}
	rc := fixtureConfig(4, sweeps.NoShard)
	m := Normalize(rc, []Result{fixtureResult(rc)})
	require.Equal(t, StatusOOM, m.Status)
	assert.NoError(t, CheckMetrics(&rc, &m))
	m = Normalize(rc, nil)
	assert.NoError(t, CheckMetrics(&rc, &m), "a run that never ran")
	assert.Error(t, CheckMetrics(nil, &Metrics{Status: StatusOK, WorldSize: 1, MFU: F64(math.NaN())}))
}

// TestReportsHoldNoInfinity: comparisons of runs with 2 to 5 repeats (no finite CI)
// and derived figures of extreme but valid runs encode as JSON; a run whose figure
// cannot be encoded is named, not reported as "unsupported value: NaN".
func TestReportsHoldNoInfinity(t *testing.T) {
	t.Run("few repeats", func(t *testing.T) {
		base := []Run{statRun(1, []float64{1.00, 1.01, 0.99})}
		cur := []Run{statRun(1, []float64{0.90, 0.91, 0.89})}
		g, err := Gate(base, cur, GateOptions{Now: gateTime})
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, g.Write(&buf, FormatJSON), "gate --format json with 3 repeats")
		cmp, err := Compare(base, cur, CompareOptions{})
		require.NoError(t, err)
		require.NoError(t, cmp.Write(&buf, FormatJSON), "compare --format json with 3 repeats")
	})
	t.Run("extreme figures", func(t *testing.T) {
		small := gateRun(1, sweeps.FullShard, nil)
		small.Metrics.TokensPerS, small.Metrics.TokensPerSPerRank = F64(MinTokensPerS), F64(MinTokensPerS)
		large := gateRun(4, sweeps.FullShard, nil)
		large.Metrics.TokensPerS, large.Metrics.TokensPerSPerRank = F64(MaxTokensPerS), F64(MaxTokensPerS/4)
		runs := []Run{small, large}
		for i := range runs {
			require.NoError(t, CheckMetrics(&runs[i].Config, &runs[i].Metrics))
		}
		Derive(runs)
		require.NotNil(t, runs[1].Derived.ScalingEfficiency)
		assert.False(t, math.IsInf(*runs[1].Derived.ScalingEfficiency, 0))
		wrapped := []Run{gateRun(2, sweeps.FullShard, nil)}
		wrapped[0].Metrics.MemBreakdownBytes = map[string]int64{"params": math.MaxInt64, "grads": math.MaxInt64, "optimizer": 1}
		Derive(wrapped)
		assert.Nil(t, wrapped[0].Derived.ModelStateBytes, "a sum that overflows is unknown, not wrapped")
		var buf bytes.Buffer
		require.NoError(t, WriteJSON(&buf, runs))
		g, err := Gate(runs, []Run{large, small}, GateOptions{Now: gateTime})
		require.NoError(t, err)
		require.NoError(t, g.Write(&buf, FormatJSON))
	})
	t.Run("a bad figure is named", func(t *testing.T) {
		r := gateRun(1, sweeps.FullShard, nil)
		r.Metrics.MFU = F64(math.Inf(1))
		err := WriteJSON(io.Discard, []Run{r})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "run "+r.Config.ID+": invalid run: mfu +Inf is not a finite figure")
	})
}

func TestSameJSON(t *testing.T) {
	v := map[string]any{"a": []any{1.5, "x \" y\\\\", true, nil}, "b": map[string]any{"c": -1e-9}, "d": "  spaced  "}
	compact, err := json.Marshal(v)
	require.NoError(t, err)
	indented, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	assert.True(t, sameJSON(append(indented, '\n'), compact))
	for _, bad := range []string{`{"a": 1 2}`, `{"a":12}x`, `{"a":"1 2"}`, `{"a":12`, `{"a" :12 , "b":1}`} {
		assert.False(t, sameJSON([]byte(bad), []byte(`{"a":12}`)), bad)
	}
	assert.True(t, sameJSON([]byte(" {\n \"a\" : 12 }\n"), []byte(`{"a":12}`)))
	assert.False(t, sameJSON([]byte(`{"a":"x y"}`), []byte(`{"a":"xy"}`)), "space inside a string counts")
	assert.False(t, sameJSON([]byte(`tr ue`), []byte(`true`)))
}

// TestCachedRefusesFIFOs: the index check opens a run's files without blocking, so
// a FIFO in a file's place does not hang Load there.
func TestCachedRefusesFIFOs(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), MetricsFile)
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	done := make(chan bool)
	go func() { done <- cached(fifo, []byte(`{"status":"ok"}`)) }()
	select {
	case ok := <-done:
		assert.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("cached blocked on a FIFO")
	}
}

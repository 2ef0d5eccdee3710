package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestOpenBLASThatDoesNotLoadIsAnEnvironmentError names an OpenBLAS that does not
// exist: with blas: openblas the run used to be stored infeasible (exit 0, and a
// resume skipped it as done), with blas: auto the named library was ignored
// without a word and the run measured gonum. Both are refused before anything
// runs (exit 2), naming the variable and the path; blas: gonum ignores it.
func TestOpenBLASThatDoesNotLoadIsAnEnvironmentError(t *testing.T) {
	t.Parallel()
	const missing = "/nonexistent/libopenblas-missing.so"
	for _, tc := range []struct {
		blas string
		code int
		want string // on stderr
	}{
		{"openblas", 2, "backend_options.blas is openblas and it does not load"},
		{"auto", 2, "FSDPBENCH_LIBOPENBLAS=" + missing + " names an OpenBLAS that does not load"},
		{"gonum", 0, ""},
	} {
		t.Run(tc.blas, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			spec := writeSpec(t, dir, nocgoSpec+"backend_options: {blas: "+tc.blas+"}\n")
			out := filepath.Join(dir, "out")
			for attempt := range 2 { // the second is a resume: it must not find the run done
				cmd := command(dir, "sweep", spec, "--results", out, "--progress", "none")
				cmd.Env = append(cmd.Env, "FSDPBENCH_LIBOPENBLAS="+missing)
				res := runCommand(t, cmd)
				require.Equal(t, tc.code, res.code, "attempt %d: %s", attempt, res.stderr)
				if tc.code == 0 {
					m, err := (&results.SweepDir{Path: filepath.Join(out, "nocgo")}).ReadMetrics(expectedRuns(t, spec).Runs[0].ID)
					require.NoError(t, err)
					assert.Equal(t, results.StatusOK, m.Status, m.Error)
					assert.Regexp(t, `^gonum `, m.Env.BLAS)
					return
				}
				assert.Contains(t, res.stderr, tc.want)
				assert.Contains(t, res.stderr, missing)
				_, err := os.Stat(filepath.Join(out, "nocgo", "runs"))
				assert.True(t, os.IsNotExist(err), "nothing is stored for an environment error: %v", err)
			}
		})
	}
}

// TestReportAndExportCheckRunArgs: a run_args.json with world_size -3 or sharding
// "banana" was shown by report and export as it was (exit 0); it is refused as a
// damaged metrics.json is (exit 2), naming the file and the field.
func TestReportAndExportCheckRunArgs(t *testing.T) {
	t.Parallel()
	rc, _ := gateRun(2, sweeps.FullShard, nil)
	for _, tc := range []struct{ name, field, value, want string }{
		{"world size", "world_size", "-3", "world_size -3 is not between 1 and"},
		{"sharding", "sharding", `"banana"`, `sharding "banana" is not one of full_shard`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := writeGateTree(t, filepath.Join(t.TempDir(), "bad"), okSpecs)
			path := filepath.Join(bad, results.RunsDir, rc.ID, results.RunArgsFile)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(b, &m))
			m[tc.field] = json.RawMessage(tc.value)
			b, err = json.Marshal(m)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, b, 0o644))
			for _, args := range [][]string{{"report", bad}, {"export", bad, "--format", "json"}, {"export", bad, "--format", "csv"}} {
				r := cli(t, args...)
				assert.Equal(t, ExitUsage, r.code, "%v: %s", args, r.stdout)
				assert.Contains(t, r.stderr, path, "%v", args)
				assert.Contains(t, r.stderr, tc.want, "%v", args)
			}
		})
	}
}

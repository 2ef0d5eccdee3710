package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// bin is the fsdpbench binary the tests run as a user would.
var bin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "fsdpbench-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "fsdpbench")
		args := []string{"build", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		build := exec.Command("go", append(args, ".")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building fsdpbench:", err)
			return 1
		}
		return m.Run()
	}())
}

// result is what one invocation of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

// fsdpbench runs the binary in dir and waits for it.
func fsdpbench(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return runCommand(t, command(dir, args...))
}

// runCommand runs cmd, an invocation of a binary under test, and waits for it.
func runCommand(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// command prepares the binary to run in dir. A race-enabled binary exits at once
// (the race runtime otherwise sleeps a second at exit) and fails on the first race.
func command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// Without COLUMNS, tables printed to a pipe are whole whatever the caller's shell exports.
	cmd.Env = append(withoutVar(os.Environ(), "COLUMNS"), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	return cmd
}

// writeSpec writes a sweep spec into dir and returns its path.
func writeSpec(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "spec.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}

// expectedRuns is the plan of a spec as the sweeps package expands it.
func expectedRuns(t *testing.T, spec string) *sweeps.Plan {
	t.Helper()
	plan, err := sweeps.Load(spec, sweeps.Options{})
	require.NoError(t, err)
	return plan
}

// slowSpec is a sweep of six sim runs that each take about 0.2 s (6 steps of 30 ms),
// long enough to be interrupted in the middle.
const slowSpec = `name: slow
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 1024
steps: 5
warmup_steps: 1
timeout: 1m
grid:
  world_size: [8]
  batch_per_device: [1, 2, 4]
  sharding: [full_shard, shard_grad_op]
backend_options:
  sleep_per_step: 30ms
`

func TestSweepWritesTheTreeAndReports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: small
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 2048
steps: 4
warmup_steps: 1
grid:
  world_size: [8]
  batch_per_device: [1, 2]
  sharding: [full_shard, no_shard]
`)
	plan := expectedRuns(t, spec)
	require.Len(t, plan.Runs, 4)

	res := fsdpbench(t, dir, "sweep", spec, "--results", "out")
	require.Equal(t, 0, res.code, res.stderr)
	sweepDir := filepath.Join(dir, "out", "small")
	assert.FileExists(t, filepath.Join(sweepDir, results.SpecFile))
	assert.FileExists(t, filepath.Join(sweepDir, results.ManifestFile))
	for _, rc := range plan.Runs {
		for _, f := range []string{results.RunArgsFile, results.MetricsFile, results.StdoutFile, results.StderrFile, results.StepsFile} {
			assert.FileExists(t, filepath.Join(sweepDir, results.RunsDir, rc.ID, f))
		}
		// The table shows every run.
		assert.Contains(t, res.stdout, rc.ID)
	}
	assert.Contains(t, res.stderr, "4 runs:")
	assert.Contains(t, res.stderr, "fsdpbench export "+filepath.Join("out", "small")+" --format csv")
	// Progress is not a result: it goes to stderr, one line per run when not a terminal.
	assert.Len(t, regexp.MustCompile(`(?m)^\[\d/4\] `).FindAllString(res.stderr, -1), 4)
	assert.NotContains(t, res.stdout, "[1/4]")

	t.Run("export csv", func(t *testing.T) {
		res := fsdpbench(t, dir, "export", sweepDir, "--format", "csv")
		require.Equal(t, 0, res.code, res.stderr)
		rows, err := csv.NewReader(strings.NewReader(res.stdout)).ReadAll()
		require.NoError(t, err)
		require.Len(t, rows, 1+len(plan.Runs))
		header := rows[0]
		assert.Contains(t, header, "status")
		idCol := -1
		for i, h := range header {
			if h == "run_id" || h == "id" {
				idCol = i
			}
		}
		require.GreaterOrEqual(t, idCol, 0, "no run ID column in %v", header)
		var ids []string
		for _, r := range rows[1:] {
			ids = append(ids, r[idCol])
		}
		var want []string
		for _, rc := range plan.Runs {
			want = append(want, rc.ID)
		}
		assert.ElementsMatch(t, want, ids)
	})
	t.Run("export json to a file", func(t *testing.T) {
		out := filepath.Join(dir, "runs.json")
		res := fsdpbench(t, dir, "export", sweepDir, "--format", "json", "-o", out)
		require.Equal(t, 0, res.code, res.stderr)
		assert.Empty(t, res.stdout)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		var runs []json.RawMessage
		require.NoError(t, json.Unmarshal(b, &runs))
		assert.Len(t, runs, len(plan.Runs))
	})
	t.Run("report pivot as markdown", func(t *testing.T) {
		res := fsdpbench(t, dir, "report", sweepDir, "--rows", "batch_per_device", "--cols", "sharding", "--metric", "peak_mem_reserved_bytes", "--format", "markdown")
		require.Equal(t, 0, res.code, res.stderr)
		assert.Contains(t, res.stdout, "|")
		assert.Contains(t, res.stdout, "full_shard")
		assert.Contains(t, res.stdout, "no_shard")
	})
	t.Run("report of a missing directory is a usage error", func(t *testing.T) {
		res := fsdpbench(t, dir, "report", filepath.Join(dir, "nope"))
		assert.Equal(t, ExitUsage, res.code)
		assert.Contains(t, res.stderr, "nope")
	})
	t.Run("dry run after the sweep skips everything", func(t *testing.T) {
		res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--dry-run")
		require.Equal(t, 0, res.code, res.stderr)
		assert.Equal(t, len(plan.Runs), strings.Count(res.stdout, "skip (done: "))
		assert.Contains(t, res.stdout, "nothing was run")
	})
}

func TestPlanShowsInfeasibleRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Unsharded Llama 3 8B keeps 16 bytes per parameter on every GPU: no H100 holds it.
	spec := writeSpec(t, dir, `name: planned
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
grid:
  world_size: [8]
  batch_per_device: [1, 8]
  sharding: [full_shard, no_shard]
`)
	plan := expectedRuns(t, spec)
	infeasible := 0
	for _, rc := range plan.Runs {
		p, err := sim.Predict(rc)
		require.NoError(t, err)
		if !p.Feasible {
			infeasible++
		}
	}
	require.Positive(t, infeasible, "the spec must hold runs the model predicts infeasible")
	require.Less(t, infeasible, len(plan.Runs))

	res := fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, infeasible, strings.Count(res.stdout, "infeasible:"), res.stdout)
	for _, rc := range plan.Runs {
		assert.Contains(t, res.stdout, rc.ID)
	}
	assert.Contains(t, res.stdout, fmt.Sprintf("%d infeasible", infeasible))
	assert.NoDirExists(t, filepath.Join(dir, "fsdpbench-results"), "plan runs nothing")
}

func TestSpecErrorsExitWithUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: bad
backend: sim
model: llama3-8b
grid:
  world_size: [8]
  shardng: [full_shard]
`)
	for _, cmd := range []string{"sweep", "plan"} {
		res := fsdpbench(t, dir, cmd, spec)
		assert.Equal(t, ExitUsage, res.code, cmd)
		assert.Regexp(t, `spec\.yaml:6:\d+: .*shardng`, res.stderr, cmd)
		assert.Empty(t, res.stdout, cmd)
	}
	res := fsdpbench(t, dir, "sweep", spec, "--set", "world_size=three")
	assert.Equal(t, ExitUsage, res.code)

	for _, args := range [][]string{{"sweep"}, {"frob"}, {"sweep", spec, "--jobs", "x"}, {"export", dir, "--format", "xml"}, {"sweep", spec, "--progress", "fancy"}} {
		res := fsdpbench(t, dir, args...)
		assert.Equal(t, ExitUsage, res.code, args)
		assert.NotEmpty(t, res.stderr, args)
	}
}

func TestSweepJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, slowSpec)
	res := fsdpbench(t, dir, "sweep", spec, "--jobs", "2")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "6 runs: 6 ok")
}

// TestMaxFitSearch is issue 25's case: Llama 3 8B at seq 4096 on 8 × H100 with
// checkpointing fits batch 3 (between two powers of two); the search must find
// it, and say how many runs it took, in plan and in sweep.
func TestMaxFitSearch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: wall
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
grid:
  world_size: [8]
  sharding: [full_shard]
  activation_checkpointing: [true]
  batch_per_device: [1]
search:
  batch_per_device: max_fit
`)
	// The largest batch the analytic model says fits, found by trying every
	// batch from 1 up: that is what the search must find, with fewer runs.
	plan := expectedRuns(t, spec)
	require.Len(t, plan.Runs, 1)
	want := 0
	for b := 1; b <= 1024; b++ {
		rc := plan.Runs[0]
		rc.BatchPerDevice, rc.GlobalBatch = b, rc.WorldSize*b*rc.GradAccum
		p, err := sim.Predict(rc)
		require.NoError(t, err)
		if !p.Feasible {
			break
		}
		want = b
	}
	require.Positive(t, want)

	pl := fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, pl.code, pl.stderr)
	assert.Regexp(t, fmt.Sprintf(`batch_per_device\s*│\s*%d\s*│`, want), pl.stdout)

	res := fsdpbench(t, dir, "sweep", spec)
	require.Equal(t, 0, res.code, res.stderr)

	b, err := os.ReadFile(filepath.Join(dir, "fsdpbench-results", "wall", results.ManifestFile))
	require.NoError(t, err)
	var man struct {
		Search []struct {
			Axis      string `json:"axis"`
			MaxFit    int    `json:"max_fit"`
			Tried     []int  `json:"tried"`
			StoppedBy string `json:"stopped_by"`
		} `json:"search"`
		Runs []results.ManifestEntry `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(b, &man))
	require.Len(t, man.Search, 1)
	assert.Equal(t, want, man.Search[0].MaxFit)
	assert.Equal(t, "batch_per_device", man.Search[0].Axis)
	assert.Contains(t, []string{"oom", "infeasible"}, man.Search[0].StoppedBy)
	assert.Len(t, man.Runs, len(man.Search[0].Tried))
	// The wall is exact: the batch just above the fit was tried and did not fit.
	assert.Contains(t, man.Search[0].Tried, want+1)
	// The table says how many runs the search took.
	assert.Regexp(t, fmt.Sprintf(`batch_per_device\s*│\s*%d\s*│\s*%d\s*│`, want, len(man.Search[0].Tried)), res.stdout)
}

func TestBackendsAndVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := fsdpbench(t, dir, "backends")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `sim\s*│\s*yes\s*│\s*no`, res.stdout)
	if _, err := os.Stat("/dev/nvidia0"); err != nil { // no GPU: gotrain says why its cuda device cannot run
		assert.Regexp(t, `gotrain\s*│\s*yes\s*│.*│\s*cuda device: no CUDA device: `, res.stdout)
	}

	res = fsdpbench(t, dir, "version")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `^fsdpbench \S+ \(commit \S+, go1\.`, res.stdout)
}

// waitFor polls until cond holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finished lists the runs of a sweep directory that have a metrics.json, with its
// modification time.
func finished(t *testing.T, sweepDir string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	matches, err := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, "*", results.MetricsFile))
	require.NoError(t, err)
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil {
			out[filepath.Base(filepath.Dir(m))] = st.ModTime()
		}
	}
	return out
}

// TestBackendAndLauncherOptionMistakesExitWithUsage: a misspelt or invalid
// backend or launcher option, or a backend the launcher cannot start, is a spec
// error: exit 2 before anything runs or is written, naming the option, what it
// takes and the runs it hits. They used to record every run infeasible and exit 0
// (launcher_options under the local launcher were ignored).
func TestBackendAndLauncherOptionMistakesExitWithUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: opts
backend: sim
hardware: h100-sxm
model: tiny
seq_len: 64
steps: 3
grid:
  world_size: [1, 2]
`)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"backend_options.x=1"}, "backend_options.x: the sim backend has no such option; known: attention, calibration, checkpointing, comm_overlap, ddp_gradient_as_bucket_view, dropout, efficiency"},
		{[]string{"backend_options.efficency=0.5"}, `backend_options.efficency: the sim backend has no such option (did you mean "efficiency"?)`},
		{[]string{"backend_options.efficiency=NaN"}, "backend_options.efficiency: must be a finite number, got NaN"},
		{[]string{"backend_options.inter_node_bus_bw_gbps=0"}, "backend_options.inter_node_bus_bw_gbps: must be in [0.001, 20000], got 0"},
		{[]string{"backend_options.sleep_per_step=forever"}, `backend_options.sleep_per_step: must be a duration such as "50ms" or "2s", got "forever"`},
		{[]string{"launcher_options.x=1"}, "launcher_options.x: the slurm launcher has no such option; known: account, constraint"},
		{[]string{"backend=gotrain", "backend_options.lrr=1"}, `backend_options.lrr: gotrain has no such option (did you mean "lr"?)`},
		{[]string{"launcher=slurm"}, "backend sim cannot run under launcher slurm"},
		{[]string{"launcher=slurm", "launcher_options.partiton=gpu"}, `launcher_options.partiton: the slurm launcher has no such option (did you mean "partition"?)`},
	} {
		for _, cmd := range [][]string{{"sweep"}, {"sweep", "--dry-run"}, {"plan"}} {
			args := append(append([]string{}, cmd...), spec, "--results", "out")
			if cmd[0] == "plan" {
				args = []string{"plan", spec}
			}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			res := fsdpbench(t, dir, args...)
			assert.Equal(t, ExitUsage, res.code, "%v: %s", args, res.stderr)
			assert.Contains(t, res.stderr, tc.want, args)
			assert.Contains(t, res.stderr, "(all 2 runs)", args)
			assert.Empty(t, res.stdout, args)
		}
	}
	assert.NoDirExists(t, filepath.Join(dir, "out"), "nothing may run or be written")

	// An option written in the spec is pointed at, file:line:col.
	spec = writeSpec(t, dir, `name: opts
backend: sim
hardware: h100-sxm
model: tiny
seq_len: 64
backend_options:
  efficiency: 0.5
  sleep_per_stp: 1ms
`)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out")
	assert.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, `spec.yaml:8:3: backend_options.sleep_per_stp: the sim backend has no such option (did you mean "sleep_per_step"?)`)
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// nocgoSpec is a gotrain run on the cpu device, two ranks of the tiny model: in a
// build without cgo its GEMMs run on gonum.
const nocgoSpec = `name: nocgo
backend: gotrain
hardware: cpu
model: tiny
seq_len: 32
steps: 3
warmup_steps: 1
timeout: 2m
base: {world_size: 2, batch_per_device: 1, sharding: full_shard, mixed_precision: fp32}
`

// TestBuildWithoutCgo builds fsdpbench as `go install` does where there is no C
// compiler (CGO_ENABLED=0) and runs it: the README's first sweep and a gotrain
// run on the cpu device work; what needs C (the cuda device, NCCL, OpenBLAS) is
// refused saying that cgo is missing and how to get it.
func TestBuildWithoutCgo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nocgo := filepath.Join(dir, "fsdpbench")
	build := exec.Command("go", "build", "-o", nocgo, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build: %s", out)
	run := func(args ...string) result {
		t.Helper()
		cmd := command(dir, args...)
		cmd.Path, cmd.Args[0] = nocgo, nocgo
		return runCommand(t, cmd)
	}
	const noCgo = "fsdpbench was built without cgo (CGO_ENABLED=0)"

	res := run("backends")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `gotrain .* cuda device: no CUDA device: `+regexp.QuoteMeta(noCgo), res.stdout)

	quickstart, err := filepath.Abs("../../sweeps/examples/quickstart.yaml")
	require.NoError(t, err)
	res = run("sweep", quickstart, "--results", filepath.Join(dir, "out"), "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	sd := &results.SweepDir{Path: filepath.Join(dir, "out", "quickstart")}
	for _, rc := range expectedRuns(t, quickstart).Runs {
		m, err := sd.ReadMetrics(rc.ID)
		require.NoError(t, err, rc.ID)
		assert.Equal(t, results.StatusOK, m.Status, rc.ID)
		if assert.NotNil(t, m.TokensPerSPerRank, rc.ID) {
			assert.Positive(t, *m.TokensPerSPerRank, rc.ID)
		}
	}

	// An OpenBLAS the spec insists on is this host's problem, not the run's: the
	// sweep refuses to start rather than store the run as infeasible.
	res = run("sweep", writeSpec(t, t.TempDir(), nocgoSpec+"backend_options: {blas: openblas}\n"), "--results", filepath.Join(dir, "blas"), "--progress", "none")
	assert.Equal(t, 2, res.code, res.stderr)
	assert.Contains(t, res.stderr, "backend_options.blas is openblas and it does not load: OpenBLAS not loaded: "+noCgo)

	for _, tc := range []struct {
		name, extra string   // extra is appended to nocgoSpec
		set         []string // --set overrides
		want        results.Status
		err         string // in the run's error; "" for none
	}{
		{"gonum GEMM", "", nil, results.StatusOK, ""},
		{"comm nccl", "backend_options: {comm: nccl}\n", nil, results.StatusInfeasible, "NCCL not loaded: " + noCgo},
		{"cuda device", "", []string{"hardware=h100-sxm"}, results.StatusInfeasible, "no CUDA device: " + noCgo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			spec := writeSpec(t, sub, nocgoSpec+tc.extra)
			args := []string{"sweep", spec, "--results", filepath.Join(sub, "out"), "--progress", "none"}
			for _, kv := range tc.set {
				args = append(args, "--set", kv)
			}
			res := run(args...)
			if tc.want == results.StatusOK {
				require.Equal(t, 0, res.code, res.stderr)
			}
			plan, err := sweeps.Load(spec, sweeps.Options{Set: tc.set})
			require.NoError(t, err)
			require.Len(t, plan.Runs, 1)
			m, err := (&results.SweepDir{Path: filepath.Join(sub, "out", "nocgo")}).ReadMetrics(plan.Runs[0].ID)
			require.NoError(t, err)
			require.Equal(t, tc.want, m.Status, m.Error)
			if tc.err != "" {
				assert.Contains(t, m.Error, tc.err)
				return
			}
			assert.Equal(t, 2, m.WorldSize)
			assert.Equal(t, 3, m.StepsMeasured)
			require.NotNil(t, m.LossLast)
			assert.Positive(t, *m.LossLast)
			assert.Regexp(t, `^gonum `, m.Env.BLAS, "the cpu device's GEMMs ran on gonum")
		})
	}
}

package results

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/<name>.golden (rewritten under -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./results -update")
	require.Equal(t, string(want), string(got), "output differs from %s; if the change is intended run go test ./results -update", path)
}

// fixtureConfig is a small point of the fixture sweep.
func fixtureConfig(ws int, sharding string) sweeps.RunConfig {
	rc := sweeps.RunConfig{Sweep: "fixture", Backend: "gotrain", Launcher: "local", Hardware: "h100-sxm",
		Model: "tiny", SeqLen: 128, Steps: 4, WarmupSteps: 1, Repeats: 1, Nodes: 1, GPUsPerNode: ws,
		WorldSize: ws, BatchPerDevice: 2, GradAccum: 1, GlobalBatch: 2 * ws, Sharding: sharding,
		BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.BF16, WrapPolicy: "transformer"}
	rc.AssignID()
	return rc
}

// fixtureResult is what a backend would report for rc: step time grows with the
// world size (communication), memory falls with sharding, and no_shard at 4 ranks
// runs out of memory.
func fixtureResult(rc sweeps.RunConfig) Result {
	res := Result{Status: StatusOK, WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), ModelFlopsPerToken: 1.2e9, PeakFlopsPerS: 989e12,
		Env: Env{GPU: "NVIDIA H100 80GB HBM3"}}
	stepTime := 0.1 * (1 + 0.05*float64(rc.WorldSize-1))
	reserved := int64(16<<30)/int64(rc.WorldSize) + 2<<30
	if rc.Sharding == sweeps.NoShard {
		stepTime = 0.09 * (1 + 0.1*float64(rc.WorldSize-1))
		reserved = 18 << 30
		if rc.WorldSize == 4 {
			return Result{Status: StatusOOM, Error: "CUDA out of memory. Tried to allocate 2.00 GiB",
				WorldSize: rc.WorldSize, PeakMemReservedBytes: I64(79 << 30)}
		}
	}
	for s := 0; s < rc.Steps; s++ {
		loss := 4.0 - 0.25*float64(s)
		res.Steps = append(res.Steps, Step{Step: rc.WarmupSteps + s, Loss: &loss, StepTimeS: stepTime * (1 + 0.01*float64(s)),
			Tokens: rc.TokensPerStep()})
		res.MeasuredWallS += stepTime * (1 + 0.01*float64(s))
	}
	res.PeakMemReservedBytes = I64(reserved)
	res.PeakMemAllocatedBytes = I64(reserved * 9 / 10)
	return res
}

// fixtureRuns is the fixture sweep as Load would return it: world sizes 1, 2, 4 by
// full_shard and no_shard, derived figures filled in.
func fixtureRuns() []Run {
	var runs []Run
	for _, ws := range []int{1, 2, 4} {
		for _, sh := range []string{sweeps.FullShard, sweeps.NoShard} {
			rc := fixtureConfig(ws, sh)
			runs = append(runs, Run{Config: rc, Metrics: Normalize(rc, []Result{fixtureResult(rc)})})
		}
	}
	Derive(runs)
	return runs
}

// predictedRuns are two sim-backend runs, one predicted not to fit.
func predictedRuns() []Run {
	var runs []Run
	for _, ws := range []int{1, 8} {
		rc := fixtureConfig(ws, sweeps.FullShard)
		rc.Sweep, rc.Backend = "plan", "sim"
		rc.AssignID()
		res := Result{Status: StatusOK, Predicted: true, WorldSize: ws, TokensPerStep: rc.TokensPerStep(),
			MeasuredWallS: 0.4 + 0.01*float64(ws), ModelFlopsPerToken: 1.2e9, PeakFlopsPerS: 989e12,
			Steps:                []Step{{Step: 1, StepTimeS: 0.1}, {Step: 2, StepTimeS: 0.1}, {Step: 3, StepTimeS: 0.1}, {Step: 4, StepTimeS: 0.1 + 0.01*float64(ws)}},
			PeakMemReservedBytes: I64(int64(16<<30) / int64(ws))}
		if ws == 8 {
			res = Result{Status: StatusInfeasible, Predicted: true, WorldSize: ws,
				Error: "predicted peak 95.0 GiB exceeds the 80 GiB of h100-sxm", PeakMemReservedBytes: I64(95 << 30)}
		}
		runs = append(runs, Run{Config: rc, Metrics: Normalize(rc, []Result{res})})
	}
	Derive(runs)
	return runs
}

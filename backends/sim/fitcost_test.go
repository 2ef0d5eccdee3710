package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// noisyRuns is n measured runs of one GPU profile: the model's predictions under
// known constants, off by a few percent, as a real machine's would be.
func noisyRuns(t testing.TB, n int) []Measurement {
	t.Helper()
	overlap := 0.8
	truth := Constants{Efficiency: 0.38, IntraNodeBWFactor: 0.7, InterNodeBWFactor: 1.6, ForwardOverlap: &overlap,
		StepOverheadS: 0.004, CollectiveLatencyS: 30e-6}
	cal := &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{"h100-sxm": truth}}
	var ms []Measurement
	shardings := []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.DDP, sweeps.HybridShard}
	for i := 0; len(ms) < n; i++ {
		nodes := 1 + i%2
		sh := shardings[(i/2)%len(shardings)]
		if sh == sweeps.HybridShard && nodes == 1 {
			nodes = 2
		}
		rc := sweeps.RunConfig{Hardware: "h100-sxm", Model: []string{"gpt2-124m", "llama3-8b"}[(i/8)%2], SeqLen: 1024,
			Nodes: nodes, GPUsPerNode: 8, WorldSize: 8 * nodes, BatchPerDevice: 1 << ((i / 16) % 4), GradAccum: 1 + (i/64)%2,
			Sharding: sh, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.BF16, ActivationCheckpointing: true}
		pred, err := predict(rc, Options{Calibration: cal})
		if err != nil {
			t.Fatal(err)
		}
		noise := 1 + 0.05*math.Sin(float64(7*i))
		ms = append(ms, Measurement{Run: fmt.Sprintf("r%03d-%s", i, rc.MakeSlug()), Config: rc,
			TokensPerS: pred.TokensPerS * noise, AllocatedBytes: int64(float64(pred.PeakMemAllocatedBytes) * noise),
			ReservedBytes: pred.PeakMemReservedBytes})
	}
	return ms
}

// TestFitFoldsAreBounded: leaving each run out alone refitted once per run, each
// refit over all the others, quadratic in the runs (98 runs: over 15 minutes).
// Up to MaxFolds runs it still does; beyond, the runs are dealt into MaxFolds
// folds, so the refits are bounded and every run still gets its held-out error.
func TestFitFoldsAreBounded(t *testing.T) {
	for _, n := range []int{7, MaxFolds + 13} {
		cal, err := Fit(noisyRuns(t, n))
		if err != nil {
			t.Fatal(err)
		}
		k := cal.Profiles["h100-sxm"]
		if want := min(n, MaxFolds); k.Fit.Folds != want {
			t.Errorf("%d runs: %d folds, want %d", n, k.Fit.Folds, want)
		}
		if len(k.Fit.LeaveOneOut) != n {
			t.Fatalf("%d runs: %d held-out rows", n, len(k.Fit.LeaveOneOut))
		}
		for _, r := range k.Fit.LeaveOneOut {
			if r.TputErr == nil || math.Abs(*r.TputErr) > 0.2 {
				t.Errorf("%d runs: %s: held-out tokens/s error %v, want within 20%% (the runs are 5%% off the model)", n, r.Run, r.TputErr)
			}
		}
	}
}

// TestFitStopsWhenTheContextIsDone: a cancelled fit returns at once with the
// context's error (it ran to the end, ignoring the signal).
func TestFitStopsWhenTheContextIsDone(t *testing.T) {
	ms := noisyRuns(t, 40)
	ctx, cancel := context.WithCancel(context.Background())
	var calls int
	start := time.Now()
	_, err := FitContext(ctx, ms, FitOptions{Progress: func(_ string, done, _ int) {
		calls++
		if done == 1 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if calls != 2 {
		t.Errorf("%d progress calls, want 2 (start, the fit to all runs): the refits ran on", calls)
	}
	t.Logf("cancelled fit returned after %v", time.Since(start))
}

package sim_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// runGotrain trains cfg on ws in-process ranks (each its own cpu device, TCP
// loopback collectives, as the gotrain backend's workers do) for steps steps and
// returns every rank's device accounting at its overall peak.
func runGotrain(t *testing.T, ws int, cfg fsdp.Config, steps int) []device.Stats {
	t.Helper()
	const timeout = time.Minute
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		_, err := rendezvous.Server{WorldSize: ws, Timeout: timeout}.Serve(context.Background(), ln)
		served <- err
	}()
	out := make([]device.Stats, ws)
	errs := make([]error, ws)
	var wg sync.WaitGroup
	for r := range ws {
		wg.Go(func() {
			ctx := context.Background()
			c, err := comm.Join(ctx, ln.Addr().String(), r, ws, comm.Options{OpTimeout: timeout, ConnectTimeout: timeout, Host: "testhost"})
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			tr, err := fsdp.New(ctx, cpu.New(cpu.Options{}), c, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer tr.Close()
			for range steps {
				if _, err := tr.Step(ctx); err != nil {
					errs[r] = err
					return
				}
			}
			out[r] = tr.Report().Memory
		})
	}
	wg.Wait()
	require.NoError(t, <-served)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return out
}

// TestGotrainPeakMemory runs real gotrain training on the tiny model over the
// strategies, world sizes, micro-batches, accumulation, checkpointing and
// precisions, and checks that the uncalibrated sim, predicting with gotrain's
// assumptions (sim.BackendAssumptions), gives each run's peak allocated bytes
// within 5%. The device accounts every allocation exactly, so a miss is the
// formulas' and the log shows by which category at the peak moment.
func TestGotrainPeakMemory(t *testing.T) {
	tiny, err := shapes.Lookup("tiny")
	require.NoError(t, err)
	type run struct {
		ws, gpn, mb, accum int
		sharding, mp       string
		ac, fwdPrefetch    bool
		prefetch           string
	}
	var runs []run
	for _, s := range []string{sweeps.DDP, sweeps.NoShard, sweeps.FullShard, sweeps.ShardGradOp} {
		for _, ws := range []int{1, 2, 4} {
			runs = append(runs, run{ws: ws, mb: 1, accum: 1, sharding: s, mp: sweeps.FP32, prefetch: sweeps.BackwardPre})
		}
		runs = append(runs,
			run{ws: 2, mb: 4, accum: 1, sharding: s, mp: sweeps.FP32, prefetch: sweeps.BackwardPre},
			run{ws: 2, mb: 2, accum: 2, sharding: s, mp: sweeps.FP32, prefetch: sweeps.BackwardPre},
			run{ws: 2, mb: 4, accum: 1, sharding: s, mp: sweeps.FP32, ac: true, prefetch: sweeps.BackwardPre},
			run{ws: 2, mb: 2, accum: 1, sharding: s, mp: sweeps.BF16, prefetch: sweeps.BackwardPre},
		)
	}
	runs = append(runs,
		run{ws: 4, gpn: 2, mb: 2, accum: 1, sharding: sweeps.HybridShard, mp: sweeps.FP32, prefetch: sweeps.BackwardPre},
		run{ws: 4, gpn: 2, mb: 1, accum: 2, sharding: sweeps.HybridShard, mp: sweeps.BF16, ac: true, prefetch: sweeps.BackwardPre},
		run{ws: 2, mb: 4, accum: 1, sharding: sweeps.FullShard, mp: sweeps.FP32, prefetch: sweeps.PrefetchNone},
		run{ws: 2, mb: 1, accum: 4, sharding: sweeps.FullShard, mp: sweeps.BF16, prefetch: sweeps.BackwardPre},
		run{ws: 2, mb: 2, accum: 3, sharding: sweeps.ShardGradOp, mp: sweeps.FP32, ac: true, prefetch: sweeps.BackwardPre},
		run{ws: 4, mb: 2, accum: 2, sharding: sweeps.FullShard, mp: sweeps.BF16, ac: true, fwdPrefetch: true, prefetch: sweeps.BackwardPre},
		run{ws: 2, mb: 16, accum: 1, sharding: sweeps.FullShard, mp: sweeps.FP32, ac: true, prefetch: sweeps.BackwardPost},
	)
	const seq = 64
	for _, tc := range runs {
		gpn := tc.gpn
		if gpn == 0 {
			gpn = tc.ws
		}
		name := fmt.Sprintf("%s/ws%d/gpn%d/mb%d/accum%d/%s/ac=%v/%s/fwd=%v", tc.sharding, tc.ws, gpn, tc.mb, tc.accum, tc.mp, tc.ac, tc.prefetch, tc.fwdPrefetch)
		t.Run(name, func(t *testing.T) {
			cfg := fsdp.Config{Shape: tiny, Sharding: tc.sharding, GPUsPerNode: gpn, BackwardPrefetch: tc.prefetch,
				ActivationCheckpointing: tc.ac, ForwardPrefetch: tc.fwdPrefetch, GradAccum: tc.accum, BatchPerDevice: tc.mb, SeqLen: seq,
				Seed: 1, LR: 1e-3, MixedPrecision: tc.mp}
			measured := runGotrain(t, tc.ws, cfg, 2)

			rc := sweeps.RunConfig{Backend: "gotrain", Hardware: "cpu", Model: "tiny", SeqLen: seq, Steps: 2,
				Nodes: tc.ws / gpn, GPUsPerNode: gpn, WorldSize: tc.ws, BatchPerDevice: tc.mb, GradAccum: tc.accum,
				GlobalBatch: tc.ws * tc.mb * tc.accum, Sharding: tc.sharding, BackwardPrefetch: tc.prefetch,
				ActivationCheckpointing: tc.ac, ForwardPrefetch: tc.fwdPrefetch, MixedPrecision: tc.mp, WrapPolicy: "transformer"}
			rc.AssignID()
			pred, err := sim.Predict(rc)
			require.NoError(t, err)
			var peak device.Stats
			for _, st := range measured {
				if st.PeakTotal > peak.PeakTotal {
					peak = st
				}
			}
			at := map[string]int64{}
			for c := device.Category(0); c < device.NumCategories; c++ {
				at[c.String()] = peak.AtPeak[c]
			}
			t.Logf("measured %d at peak %v; sim %d %v (%+.1f%%)", peak.PeakTotal, at,
				pred.PeakMemAllocatedBytes, pred.Breakdown,
				100*float64(pred.PeakMemAllocatedBytes-peak.PeakTotal)/float64(peak.PeakTotal))
			// The target is 5%; the replay is exact, so any difference means
			// the trainer's allocations changed and gotrainPeak must follow them.
			assert.InEpsilon(t, float64(peak.PeakTotal), float64(pred.PeakMemAllocatedBytes), 0.05)
			assert.Equal(t, peak.PeakTotal, pred.PeakMemAllocatedBytes,
				"the Go trainer's peak differs from the sim's replay of its schedule (backends/sim/gotrain.go)")
			// And so does what was live at that moment, category by category (the
			// trainer counts gathered parameters as params, the logits as activations).
			b := pred.Breakdown
			assert.Equal(t, map[string]int64{"params": b[sim.MemParams] + b[sim.MemBuffers], "grads": b[sim.MemGrads],
				"optimizer": b[sim.MemOptimizer], "activations": b[sim.MemActivations] + b[sim.MemLogits], "comm": 0, "other": 0}, at)
		})
	}
}

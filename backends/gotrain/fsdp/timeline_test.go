package fsdp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestBreakdownUnions feeds the recorder hand-made intervals with known
// overlaps and checks every figure exactly: compute and collectives are
// unions (overlapping pieces counted once), exposed communication is the
// collectives' time no computation covers, other the rest, and each kind its
// own union (the kinds may add up to more than the collectives' union).
func TestBreakdownUnions(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var r recorder
	iv := func(op opKind, lane Lane, wait bool, a, b int) {
		r.add(op, lane, 0, wait, ms(a), ms(b))
	}
	// Step of 100 ms: compute [10,30) [25,40) [60,80); an all-gather runs on
	// its goroutine [0,20) and is waited on [0,10); a reduce-scatter [35,50);
	// an all-reduce [45,70) beside it; an interval past the step's end [95,120).
	iv(opForward, LaneCompute, false, 10, 30)
	iv(opBackward, LaneCompute, false, 25, 40)
	iv(opOptimizer, LaneCompute, false, 60, 80)
	iv(opAllGather, LaneGather, false, 0, 20)
	iv(opAllGather, LaneCompute, true, 0, 10)
	iv(opReduceScatter, LaneReduce, false, 35, 50)
	iv(opAllReduce, LaneReduce, false, 45, 70)
	iv(opAllReduce, LaneReduce, false, 95, 120)
	b := r.breakdown(ms(100), "test")
	// compute: [10,40) [60,80) = 50; collectives: [0,20) [35,70) [95,100) = 60;
	// covered by compute: [10,20) [35,40) [60,70) = 25; exposed 35; other 15.
	assert.InDelta(t, 0.050, b.ComputeS, 1e-12)
	assert.InDelta(t, 0.060, b.CollectiveS, 1e-12)
	assert.InDelta(t, 0.035, b.ExposedCommS, 1e-12)
	assert.InDelta(t, 0.015, b.OtherS, 1e-12)
	require.NotNil(t, b.AllGatherS)
	require.NotNil(t, b.ReduceScatterS)
	require.NotNil(t, b.AllReduceS)
	assert.InDelta(t, 0.020, *b.AllGatherS, 1e-12)
	assert.InDelta(t, 0.015, *b.ReduceScatterS, 1e-12)
	assert.InDelta(t, 0.030, *b.AllReduceS, 1e-12)
	assert.Equal(t, "test", b.Source)
	f, msg := b.Check()
	assert.Empty(t, f, msg)
	assert.InDelta(t, 1-35.0/60, *b.Overlap(), 1e-12)

	// No collective at all: the kinds stay unknown, exposed is zero.
	r.cur = r.cur[:0]
	iv(opForward, LaneCompute, false, 0, 10)
	b = r.breakdown(ms(20), "test")
	assert.Nil(t, b.AllGatherS)
	assert.Zero(t, b.CollectiveS)
	assert.Nil(t, b.Overlap())
	assert.InDelta(t, 0.010, b.OtherS, 1e-12)
}

// breakdownRun is what trainBreakdown saw on every rank.
type breakdownRun struct {
	breakdowns [][]results.StepBreakdown // [rank][step]
	events     [][]TimelineEvent
	steps      [][]TimelineStep
	dropped    []int
}

// trainBreakdown runs cfg for n steps on ws ranks over opts' transport,
// keeping the timeline of every step but the first, at most keep events.
func trainBreakdown(t *testing.T, ws int, cfg Config, n int, opts comm.Options, keep int) breakdownRun {
	t.Helper()
	world := newWorldWith(t, ws, opts)
	out := breakdownRun{breakdowns: make([][]results.StepBreakdown, ws), events: make([][]TimelineEvent, ws),
		steps: make([][]TimelineStep, ws), dropped: make([]int, ws)}
	errs := eachRank(ws, func(r int) error {
		ctx := context.Background()
		tr, err := New(ctx, cpu.New(cpu.Options{}), world[r], cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		for i := range n {
			if i == 1 {
				tr.KeepTimeline(keep)
			}
			rep, err := tr.Step(ctx)
			if err != nil {
				return err
			}
			assert.Equal(t, rep.Time.Seconds(), rep.Breakdown.StepS, "the breakdown is the step's")
			out.breakdowns[r] = append(out.breakdowns[r], rep.Breakdown)
		}
		out.steps[r], out.events[r], out.dropped[r] = tr.Timeline()
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return out
}

// TestStepBreakdown trains full_shard on two ranks over shared memory and over
// TCP, without prefetch, with forward and backward_pre prefetch, and with
// backward_post alone: every step's breakdown is consistent (compute + exposed
// + other = step) and has all-gathers, reduce-scatters and all-reduces.
// Without prefetch every all-gather is waited for as soon as it is issued and
// the reductions block, so no collective overlaps computation: exposed
// communication is all of it. With forward and backward_pre prefetch the next
// unit's all-gather runs on its goroutine during the current unit's compute,
// so some collective time is hidden (exposed < collectives on some step) and
// the timeline shows an all-gather overlapping a computation. backward_post
// issues the previous unit's all-gather after the current unit's backward, so
// on this device it runs beside the blocking reduce-scatter, never beside
// computation: nothing is hidden, as without prefetch. The timeline holds the
// kept steps only.
func TestStepBreakdown(t *testing.T) {
	const n = 4
	for _, transport := range []string{comm.TransportShm, comm.TransportTCP} {
		for _, pf := range []string{"none", "pre", "post"} {
			name := transport + "/" + pf
			cfg := baseConfig(t)
			cfg.Sharding, cfg.BatchPerDevice = sweeps.FullShard, 2
			prefetch := pf == "pre"
			switch pf {
			case "pre":
				cfg.ForwardPrefetch, cfg.BackwardPrefetch = true, sweeps.BackwardPre
			case "post":
				cfg.BackwardPrefetch = sweeps.BackwardPost
			}
			t.Run(name, func(t *testing.T) {
				run := trainBreakdown(t, 2, cfg, n, comm.Options{Transport: transport}, 1<<20)
				hidden := false
				for r, bs := range run.breakdowns {
					for i, b := range bs {
						f, msg := b.Check()
						require.Empty(t, f, "rank %d step %d: %s", r, i+1, msg)
						assert.Equal(t, "gotrain", b.Source)
						for _, k := range []*float64{b.AllGatherS, b.ReduceScatterS, b.AllReduceS} {
							require.NotNil(t, k, "rank %d step %d: every kind ran", r, i+1)
							assert.Positive(t, *k)
						}
						assert.Positive(t, b.ComputeS)
						if !prefetch {
							assert.InDelta(t, b.CollectiveS, b.ExposedCommS, 1e-9, "rank %d step %d: %s: no collective overlaps computation", r, i+1, pf)
						}
						hidden = hidden || b.ExposedCommS < b.CollectiveS-1e-9
					}
					assert.Len(t, run.steps[r], n-1, "rank %d: the kept steps", r)
					assert.Zero(t, run.dropped[r])
					assert.Equal(t, 2, run.steps[r][0].Step)
				}
				overlap := gatherOverlapsCompute(run.events)
				if prefetch {
					assert.True(t, hidden, "with prefetch some collective time is hidden")
					assert.True(t, overlap, "with prefetch an all-gather overlaps a computation")
				} else {
					assert.False(t, overlap, "%s: no all-gather overlaps a computation", pf)
				}
			})
		}
	}
}

// gatherOverlapsCompute is whether, on some rank, an all-gather on the gather
// lane runs during a computation of the same step.
func gatherOverlapsCompute(events [][]TimelineEvent) bool {
	for _, evs := range events {
		for _, g := range evs {
			if g.Lane != LaneGather {
				continue
			}
			for _, c := range evs {
				if c.Cat == "compute" && c.Step == g.Step && c.Start < g.Start+g.Dur && g.Start < c.Start+c.Dur {
					return true
				}
			}
		}
	}
	return false
}

// TestTimelineCap keeps fewer events than the steps record: the rest are
// counted as dropped, and the names say what ran.
func TestTimelineCap(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Sharding = sweeps.FullShard
	run := trainBreakdown(t, 2, cfg, 3, comm.Options{}, 10)
	for r := range 2 {
		assert.Len(t, run.events[r], 10)
		assert.Positive(t, run.dropped[r])
		assert.Len(t, run.steps[r], 2)
		assert.Equal(t, "wait all-gather embedding", run.events[r][0].Name)
		for _, e := range run.events[r] {
			assert.Contains(t, []string{"compute", "all-gather", "reduce-scatter", "all-reduce"}, e.Cat)
		}
	}
}

package fsdp

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// testTimeout bounds every collective and connection, so a hang fails fast.
const testTimeout = 20 * time.Second

const (
	steps       = 10
	globalBatch = 4
	seqLen      = 16
	parityTol   = 1e-5
)

// baseConfig is tiny at the parity tests' global batch on one rank.
func baseConfig(t testing.TB) Config {
	s, err := shapes.Lookup("tiny")
	require.NoError(t, err)
	return Config{Shape: s, Sharding: sweeps.NoShard, BatchPerDevice: globalBatch, SeqLen: seqLen,
		Seed: 7, LR: 3e-3, WeightDecay: 0.01}
}

// newWorld opens size ranks in this process over loopback.
func newWorld(t testing.TB, size int) []comm.Communicator {
	t.Helper()
	return newWorldWith(t, size, comm.Options{})
}

// newWorldWith is newWorld with opts (its timeouts and host are the tests').
func newWorldWith(t testing.TB, size int, opts comm.Options) []comm.Communicator {
	t.Helper()
	opts.OpTimeout, opts.ConnectTimeout, opts.Host = testTimeout, testTimeout, "testhost"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		_, err := rendezvous.Server{WorldSize: size, Timeout: testTimeout}.Serve(context.Background(), ln)
		served <- err
	}()
	comms := make([]comm.Communicator, size)
	errs := eachRank(size, func(r int) error {
		var err error
		comms[r], err = comm.Join(context.Background(), ln.Addr().String(), r, size, opts)
		return err
	})
	require.NoError(t, <-served)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// eachRank runs f for every rank concurrently and returns the errors by rank.
func eachRank(size int, f func(r int) error) []error {
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// outcome is what a run of every rank produced.
type outcome struct {
	losses [][]float64 // [rank][step]
	norms  []float64   // rank 0's gradient norms
	// state is each rank's params+grads+optimizer bytes held between steps.
	state   []int64
	reports []RankReport
}

// train runs cfg for n steps on ws ranks, each with its own cpu device.
func train(t testing.TB, ws int, cfg Config, n int) outcome {
	t.Helper()
	world := newWorld(t, ws)
	out := outcome{losses: make([][]float64, ws), state: make([]int64, ws), reports: make([]RankReport, ws)}
	errs := eachRank(ws, func(r int) error {
		ctx := context.Background()
		tr, err := New(ctx, cpu.New(cpu.Options{}), world[r], cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		for range n {
			rep, err := tr.Step(ctx)
			if err != nil {
				return err
			}
			out.losses[r] = append(out.losses[r], rep.Loss)
			if r == 0 {
				out.norms = append(out.norms, rep.GradNorm)
			}
		}
		out.reports[r] = tr.Report()
		cur := out.reports[r].Memory.Current
		out.state[r] = cur[device.Params] + cur[device.Grads] + cur[device.Optimizer]
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return out
}

// requireRelClose checks every step's loss against want within relative tol.
func requireRelClose(t testing.TB, want, got []float64, tol float64, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	worst := 0.0
	for i := range want {
		rel := math.Abs(got[i]-want[i]) / math.Abs(want[i])
		require.LessOrEqual(t, rel, tol, "%s: step %d loss %.9g, reference %.9g", msg, i+1, got[i], want[i])
		worst = max(worst, rel)
	}
	t.Logf("%s: largest relative difference %.2g", msg, worst)
}

// TestLossParity checks that the per-step losses of every strategy, world size,
// checkpointing and prefetch setting equal one rank's at the same global batch.
func TestLossParity(t *testing.T) {
	ref := train(t, 1, baseConfig(t), steps)
	// The updates must move the loss far more than the tolerance, or parity would
	// hold for a trainer that never updated anything.
	frozenCfg := baseConfig(t)
	frozenCfg.LR = 1e-12
	frozen := train(t, 1, frozenCfg, steps)
	moved := math.Abs(ref.losses[0][steps-1]-frozen.losses[0][steps-1]) / frozen.losses[0][steps-1]
	require.Greater(t, moved, 100*parityTol, "training must change the loss for parity to mean anything")

	type variant struct {
		ws                int
		sharding          string
		ac                bool
		bwd               string
		fwd               bool
		gpusPerNode       int
		clip              float64
		clipWantReference bool
	}
	cases := []variant{
		{ws: 1, sharding: sweeps.FullShard, ac: true, bwd: sweeps.BackwardPre, fwd: true},
		{ws: 2, sharding: sweeps.FullShard, bwd: sweeps.BackwardPost},
		{ws: 2, sharding: sweeps.ShardGradOp, ac: true},
		{ws: 2, sharding: sweeps.DDP},
		{ws: 4, sharding: sweeps.FullShard, bwd: sweeps.BackwardPre, fwd: true},
		{ws: 4, sharding: sweeps.FullShard, ac: true, bwd: sweeps.BackwardPost},
		{ws: 4, sharding: sweeps.ShardGradOp, fwd: true},
		{ws: 4, sharding: sweeps.ShardGradOp, ac: true},
		{ws: 4, sharding: sweeps.HybridShard, gpusPerNode: 2, bwd: sweeps.BackwardPre},
		{ws: 4, sharding: sweeps.HybridShard, gpusPerNode: 2, ac: true, fwd: true, bwd: sweeps.BackwardPost},
		{ws: 4, sharding: sweeps.NoShard},
		{ws: 4, sharding: sweeps.NoShard, ac: true},
		{ws: 4, sharding: sweeps.DDP, ac: true},
		{ws: 4, sharding: sweeps.DDP},
	}
	for _, c := range cases {
		name := fmt.Sprintf("ws%d-%s-ac%v-%s-fwd%v", c.ws, c.sharding, c.ac, c.bwd, c.fwd)
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Sharding, cfg.GPUsPerNode = c.sharding, c.gpusPerNode
			cfg.ActivationCheckpointing, cfg.BackwardPrefetch, cfg.ForwardPrefetch = c.ac, c.bwd, c.fwd
			cfg.BatchPerDevice = globalBatch / c.ws
			got := train(t, c.ws, cfg, steps)
			for r := range c.ws {
				requireRelClose(t, ref.losses[0], got.losses[r], parityTol, fmt.Sprintf("rank %d", r))
			}
		})
	}
}

// TestGradClipParity checks that the global norm is the same however the
// gradients are sharded, and that clipping changes training identically.
func TestGradClipParity(t *testing.T) {
	cfg := baseConfig(t)
	cfg.GradClip = 0.5
	ref := train(t, 1, cfg, 4)
	require.Greater(t, ref.norms[0], cfg.GradClip, "the clip must bite for the test to mean anything")
	unclipped := train(t, 1, baseConfig(t), 4)
	require.NotEqual(t, unclipped.losses[0][3], ref.losses[0][3])
	for _, sharding := range []string{sweeps.FullShard, sweeps.HybridShard, sweeps.DDP} {
		t.Run(sharding, func(t *testing.T) {
			c := cfg
			c.Sharding, c.GPUsPerNode, c.BatchPerDevice = sharding, 2, 1
			got := train(t, 4, c, 4)
			requireRelClose(t, ref.norms, got.norms, parityTol, "grad norm")
			requireRelClose(t, ref.losses[0], got.losses[0], parityTol, "loss")
		})
	}
}

// TestGradAccumulation checks that two micro-steps of one sample equal one of two.
func TestGradAccumulation(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Sharding, cfg.BatchPerDevice = sweeps.FullShard, 2
	one := train(t, 2, cfg, steps)
	cfg.BatchPerDevice, cfg.GradAccum = 1, 2
	two := train(t, 2, cfg, steps)
	requireRelClose(t, one.losses[0], two.losses[0], parityTol, "grad_accum 2 × bpd 1 against bpd 2")
}

// TestMemoryShards checks, by the device's accounting, that full_shard at world
// size 4 holds at most 0.3 of one rank's parameters, gradients and optimizer state.
func TestMemoryShards(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Sharding = sweeps.FullShard
	one := train(t, 1, cfg, 1)
	cfg.BatchPerDevice = 1
	four := train(t, 4, cfg, 1)
	for r := range 4 {
		ratio := float64(four.state[r]) / float64(one.state[0])
		t.Logf("rank %d: model state %d bytes, %.3f of one rank's %d; peak params %d grads %d optimizer %d activations %d",
			r, four.state[r], ratio, one.state[0], four.reports[r].Memory.Peak[device.Params],
			four.reports[r].Memory.Peak[device.Grads], four.reports[r].Memory.Peak[device.Optimizer],
			four.reports[r].Memory.Peak[device.Activations])
		assert.LessOrEqual(t, ratio, 0.3, "rank %d holds %d bytes of model state, one rank alone %d", r, four.state[r], one.state[0])
		peak := four.reports[r].Memory.Peak
		assert.Positive(t, peak[device.Activations], "rank %d activations", r)
		assert.Greater(t, peak[device.Params], four.reports[r].Memory.Current[device.Params],
			"rank %d: gathered units must show in the params peak", r)
	}
	// One rank holds the parameters, their gradient and AdamW's two moments: four
	// float32 copies of the model.
	units, err := Layout(cfg.Shape, 1)
	require.NoError(t, err)
	var elems int64
	for _, u := range units {
		elems += int64(u.Padded)
	}
	assert.Equal(t, 4*4*elems, one.state[0])
}

// TestCollectiveCounts checks the collectives each strategy issues per step
// against what its definition implies.
func TestCollectiveCounts(t *testing.T) {
	cfg := baseConfig(t)
	units := int64(cfg.Shape.Layers + 2)
	cases := []struct {
		sharding                       string
		gathers, reduceScatters, allRd int64 // per step, with grad_accum 2
	}{
		{sweeps.FullShard, 2 * 2 * units, units, 1},
		{sweeps.ShardGradOp, 2 * units, units, 1},
		{sweeps.DDP, 0, 0, units + 1},
	}
	for _, c := range cases {
		t.Run(c.sharding, func(t *testing.T) {
			cfg := cfg
			cfg.Sharding, cfg.BatchPerDevice, cfg.GradAccum, cfg.ForwardPrefetch = c.sharding, 1, 2, true
			got := train(t, 2, cfg, 3)
			st := got.reports[0].Comm
			assert.Equal(t, 3*c.gathers, st.AllGather.Calls)
			assert.Equal(t, 3*c.reduceScatters, st.ReduceScatter.Calls)
			assert.Equal(t, 3*c.allRd, st.AllReduce.Calls)
		})
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"unknown sharding", func(c *Config) { c.Sharding = "zero3" }, "sharding"},
		{"hybrid without nodes", func(c *Config) { c.Sharding = sweeps.HybridShard }, "gpus_per_node"},
		{"bad prefetch", func(c *Config) { c.BackwardPrefetch = "early" }, "backward_prefetch"},
		{"no batch", func(c *Config) { c.BatchPerDevice = 0 }, "batch_per_device"},
		{"no lr", func(c *Config) { c.LR = 0 }, "lr"},
		{"float64 device", nil, "float32"},
	}
	world := newWorld(t, 1)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t)
			dev := cpu.New(cpu.Options{})
			if c.edit != nil {
				c.edit(&cfg)
			} else {
				dev = cpu.New(cpu.Options{Float64: true})
			}
			_, err := New(context.Background(), dev, world[0], cfg)
			require.ErrorContains(t, err, c.want)
			assert.Zero(t, dev.Memory().Total, "a refused trainer must free what it allocated")
		})
	}
}

// TestOutOfMemoryReleases checks that a step that runs out of device memory
// reports it and leaves only the shards allocated.
func TestOutOfMemoryReleases(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Sharding = sweeps.FullShard
	units, err := Layout(cfg.Shape, 1)
	require.NoError(t, err)
	var elems int64
	for _, u := range units {
		elems += int64(u.Padded)
	}
	state := 4 * 4 * elems
	// Room for the model state and one unit's gradient, not the activations.
	dev := cpu.New(cpu.Options{LimitBytes: state + 4*int64(units[1].Padded)})
	world := newWorld(t, 1)
	tr, err := New(context.Background(), dev, world[0], cfg)
	require.NoError(t, err)
	defer tr.Close()
	_, err = tr.Step(context.Background())
	require.ErrorIs(t, err, device.ErrOutOfMemory)
	assert.Equal(t, state, dev.Memory().Total, "a failed step must free its transient buffers")
	_, err = tr.Step(context.Background())
	require.ErrorContains(t, err, "unusable")
	require.NoError(t, tr.Close())
	assert.Zero(t, dev.Memory().Total)
}

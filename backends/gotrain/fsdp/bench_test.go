package fsdp

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// BenchmarkStep is one optimizer step on one rank, and reports tokens/s: tiny
// under full_shard (seq 16, batch 4), and issue 16's model
// (sweeps/examples/models/llama-h256-l4) under DDP at seq 128, batch 4, and the
// larger llama-h512-l8 at seq 256, the steps cpu-engines-h256.yaml and
// cpu-engines-h512.yaml time at world size 1 (optimizer included). OpenBLAS gets
// GOMAXPROCS threads, as in a worker, so -cpu 1,2 shows how a step scales over
// cores; -cpuprofile shows where it goes.
func BenchmarkStep(b *testing.B) {
	h256, err := shapes.ReadConfig("../../../sweeps/examples/models/llama-h256-l4/config.json")
	require.NoError(b, err)
	h512, err := shapes.ReadConfig("../../../sweeps/examples/models/llama-h512-l8/config.json")
	require.NoError(b, err)
	tiny := baseConfig(b)
	tiny.Sharding = sweeps.FullShard
	issue := Config{Shape: h256, Sharding: sweeps.DDP, BatchPerDevice: 4, SeqLen: 128, Seed: 7, LR: 1e-3, WeightDecay: 0.01}
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"tiny-full_shard", tiny}, {"llama-h256-l4-ddp", issue},
		{"llama-h512-l8-ddp", Config{Shape: h512, Sharding: sweeps.DDP, BatchPerDevice: 4, SeqLen: 256, Seed: 7, LR: 1e-3, WeightDecay: 0.01}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if lib, err := openblas.Load(); err == nil { // as a worker does: -cpu 1,2 shows the scaling
				require.NoError(b, lib.SetThreads(runtime.GOMAXPROCS(0)))
			}
			world := newWorld(b, 1)
			tr, err := New(context.Background(), cpu.New(cpu.Options{}), world[0], bc.cfg)
			require.NoError(b, err)
			defer tr.Close()
			tokens := 0
			for b.Loop() {
				rep, err := tr.Step(context.Background())
				require.NoError(b, err)
				tokens += rep.Tokens
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkStepTransports times full_shard steps of issue 16's model
// (llama-h256-l4, seq 128, batch 4 per rank, and batch 1, where the gathers weigh
// more against the compute) at world size 2 and 4 in this process, over shared
// memory with zero-copy gathers (shm: each unit resident in one shared buffer
// per node, the shards its pieces, the all-gather a barrier), over shared memory
// with copying gathers into one shared buffer per unit (shm-shared: each rank
// copies its shard in), over shared memory without shared buffers (shm-copy:
// every all-gather copies through the segment) and over the TCP ring, one step
// of each in turn so that the machine's changing load weighs on all alike; it
// reports each one's step time and each one's ratio to shm's (>1: zero-copy is
// faster). OpenBLAS gets one thread a rank at most, as a node's workers divide
// the cores.
//
//	go test ./backends/gotrain/fsdp -run '^$' -bench StepTransports -benchtime 10x
func BenchmarkStepTransports(b *testing.B) {
	h256, err := shapes.ReadConfig("../../../sweeps/examples/models/llama-h256-l4/config.json")
	require.NoError(b, err)
	for _, c := range []struct{ ws, batch int }{{2, 4}, {4, 4}, {2, 1}, {4, 1}} {
		ws := c.ws
		b.Run(fmt.Sprintf("ws=%d/batch=%d", ws, c.batch), func(b *testing.B) {
			if lib, err := openblas.Load(); err == nil {
				require.NoError(b, lib.SetThreads(max(1, runtime.GOMAXPROCS(0)/ws)))
			}
			cfg := Config{Shape: h256, Sharding: sweeps.FullShard, BatchPerDevice: c.batch, SeqLen: 128, Seed: 7, LR: 1e-3, WeightDecay: 0.01,
				BackwardPrefetch: sweeps.BackwardPre}
			const shmShared, shmCopy = "shm-shared", "shm-copy"
			transports := []string{comm.TransportShm, shmShared, shmCopy, comm.TransportTCP}
			trainers := map[string][]*Trainer{}
			for _, tr := range transports {
				opts, cfg := comm.Options{Transport: tr}, cfg
				switch tr {
				case shmShared:
					opts, cfg.copyGathers = comm.Options{Transport: comm.TransportShm}, true
				case shmCopy:
					opts = comm.Options{Transport: comm.TransportShm, ShmArenaBytes: -1}
				}
				world := newWorldWith(b, ws, opts)
				ts := make([]*Trainer, ws)
				for r, err := range eachRank(ws, func(r int) error {
					var err error
					ts[r], err = New(context.Background(), cpu.New(cpu.Options{}), world[r], cfg)
					return err
				}) {
					require.NoError(b, err, "rank %d", r)
				}
				b.Cleanup(func() {
					for _, t := range ts {
						t.Close()
					}
				})
				trainers[tr] = ts
			}
			step := func(tr string) time.Duration {
				start := time.Now()
				for r, err := range eachRank(ws, func(r int) error { _, err := trainers[tr][r].Step(context.Background()); return err }) {
					require.NoError(b, err, "%s rank %d", tr, r)
				}
				return time.Since(start)
			}
			for _, tr := range transports { // warm-up: pools, pages, sockets
				step(tr)
			}
			took := map[string]time.Duration{}
			iters := 0
			for b.Loop() {
				for _, tr := range transports {
					took[tr] += step(tr)
				}
				iters++
			}
			for _, tr := range transports {
				b.ReportMetric(took[tr].Seconds()/float64(iters), tr+"-s/step")
				if tr != comm.TransportShm {
					b.ReportMetric(took[tr].Seconds()/took[comm.TransportShm].Seconds(), tr+"/shm")
				}
			}
			require.Positive(b, trainers[comm.TransportShm][0].inPlaceGathers, "shm gathers in place")
			require.Zero(b, trainers[shmShared][0].inPlaceGathers, "shm-shared copies")
			require.Positive(b, trainers[shmShared][0].sharedGathers, "shm-shared gathers into shared buffers")
		})
	}
}

package fsdp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// protocolLog records the stream protocol one rank's trainer follows.
type protocolLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func (l *protocolLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// loggedStreams are streams for the cpu device, whose ops finish when they
// return: the schedule's results are the goroutine path's, and the events only
// log what the schedule asks of the streams.
type loggedStreams struct {
	dev device.Device
	log *protocolLog
}

type loggedEvent int

var streamNames = map[device.Stream]string{device.ComputeStream: "compute", device.CommStream: "comm"}

func (d loggedStreams) Record(s device.Stream) device.Event {
	d.log.mu.Lock()
	d.log.next++
	e := loggedEvent(d.log.next)
	d.log.mu.Unlock()
	d.log.add("record %s e%d", streamNames[s], e)
	return e
}
func (d loggedStreams) Wait(s device.Stream, e device.Event) {
	d.log.add("wait %s e%d", streamNames[s], e.(loggedEvent))
}
func (d loggedStreams) WaitHost(device.Event) error { return nil }
func (d loggedStreams) Release(device.Event)        {}
func (d loggedStreams) FreeAfter(b device.Buffer, e device.Event) {
	d.log.add("freeafter e%d", e.(loggedEvent))
	d.dev.Free(b)
}

// withLoggedStreams makes the trainers of this test find loggedStreams for the
// devices registered in the returned map.
func withLoggedStreams(t *testing.T) *sync.Map {
	var reg sync.Map
	saved := streamsOf
	streamsOf = func(d device.Device) (device.Streams, bool) {
		s, ok := reg.Load(d)
		if !ok {
			return nil, false
		}
		return s.(loggedStreams), true
	}
	t.Cleanup(func() { streamsOf = saved })
	return &reg
}

// streamComm is a communicator with stream collectives that run when started
// (the TCP ring on host views), logging each start.
type streamComm struct {
	comm.Communicator
	log *protocolLog
}

type donePending struct{ err error }

func (p donePending) Wait() error { return p.err }

func (c streamComm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	sub, err := c.Communicator.Split(ctx, color, key)
	if sub == nil || err != nil {
		return sub, err
	}
	return streamComm{sub, c.log}, nil
}

func (c streamComm) StartAllGather(ctx context.Context, dst, src device.Buffer) (comm.Pending, error) {
	c.log.add("start all_gather")
	return donePending{comm.OnBuffers(c.Communicator).AllGatherBuffers(ctx, dst, src)}, nil
}

func (c streamComm) StartReduceScatter(ctx context.Context, dst, src device.Buffer, op comm.Op) (comm.Pending, error) {
	c.log.add("start reduce_scatter")
	return donePending{comm.OnBuffers(c.Communicator).ReduceScatterBuffers(ctx, dst, src, op)}, nil
}

func (c streamComm) StartAllReduce(ctx context.Context, buf device.Buffer, op comm.Op) (comm.Pending, error) {
	c.log.add("start all_reduce")
	return donePending{comm.OnBuffers(c.Communicator).AllReduceBuffers(ctx, buf, op)}, nil
}

// trainOnStreams is train with every rank's device and world wrapped for the
// stream schedule; it returns the losses and every rank's protocol.
func trainOnStreams(t *testing.T, ws int, cfg Config, n int) ([][]float64, [][]string) {
	t.Helper()
	world := newWorld(t, ws)
	reg := withLoggedStreams(t)
	losses := make([][]float64, ws)
	logs := make([]*protocolLog, ws)
	errs := eachRank(ws, func(r int) error {
		ctx := context.Background()
		logs[r] = &protocolLog{}
		dev := cpu.New(cpu.Options{})
		reg.Store(dev, loggedStreams{dev, logs[r]})
		tr, err := New(ctx, dev, streamComm{world[r], logs[r]}, cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		if tr.streams == nil {
			return fmt.Errorf("rank %d: the stream schedule is not in use", r)
		}
		for range n {
			rep, err := tr.Step(ctx)
			if err != nil {
				return err
			}
			losses[r] = append(losses[r], rep.Loss)
		}
		return nil
	})
	lines := make([][]string, ws)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		lines[r] = logs[r].lines
	}
	return losses, lines
}

// starts is the sequence of collectives a rank started.
func starts(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "start ") {
			out = append(out, l)
		}
	}
	return out
}

// protocolViolations checks rank 0's log against the schedule (streams.go):
// each collective waits on the comm stream for an event just recorded on the
// compute stream; the compute stream waits for every all-gather's event; each
// full gradient is freed after the reduce-scatter's event; after the last
// collective, the compute stream waits for the comm stream (before AdamW).
func protocolViolations(lines []string) []string {
	var bad []string
	gatherEvents := map[string]bool{}
	waited := map[string]bool{}
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "wait compute ") {
			waited[strings.TrimPrefix(l, "wait compute ")] = true
		}
		if !strings.HasPrefix(l, "start ") {
			continue
		}
		last = i
		if l == "start all_reduce" && i > 0 && strings.HasPrefix(lines[i-1], "freeafter ") {
			continue // hybrid_shard's all-reduce of the shard follows its reduce-scatter on the comm stream
		}
		if i < 2 || !strings.HasPrefix(lines[i-2], "record compute ") || !strings.HasPrefix(lines[i-1], "wait comm ") ||
			strings.TrimPrefix(lines[i-2], "record compute ") != strings.TrimPrefix(lines[i-1], "wait comm ") {
			bad = append(bad, fmt.Sprintf("line %d: %s without the comm stream waiting for the compute stream", i, l))
		}
		if l == "start all_gather" {
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "record comm ") {
				bad = append(bad, fmt.Sprintf("line %d: all-gather without an event after it", i))
				continue
			}
			gatherEvents[strings.TrimPrefix(lines[i+1], "record comm ")] = true
		}
		if l == "start reduce_scatter" {
			if i+2 >= len(lines) || !strings.HasPrefix(lines[i+1], "record comm ") ||
				lines[i+2] != "freeafter "+strings.TrimPrefix(lines[i+1], "record comm ") {
				bad = append(bad, fmt.Sprintf("line %d: the full gradient is not freed after the reduce-scatter's event", i))
			}
		}
	}
	if last >= 0 && (last+4 > len(lines) || !strings.Contains(strings.Join(lines[last:], "\n"), "\nrecord comm ")) {
		bad = append(bad, "no comm-stream event after the last collective")
	} else if last >= 0 {
		tail := lines[last:]
		ok := false
		for i := 0; i+1 < len(tail); i++ {
			ok = ok || strings.HasPrefix(tail[i], "record comm ") && tail[i+1] == "wait compute "+strings.TrimPrefix(tail[i], "record comm ")
		}
		if !ok {
			bad = append(bad, "the compute stream does not wait for the comm stream after the last collective")
		}
	}
	for e := range gatherEvents {
		if !waited[e] {
			bad = append(bad, fmt.Sprintf("the compute stream never waits for all-gather event %s", e))
		}
	}
	return bad
}

// TestStreamScheduleProtocol runs the stream schedule on a cpu device that
// logs what it is asked of streams: it gives the goroutine path's losses, bit
// for bit, and follows the protocol; each EnvDropWait value breaks it where it
// says, which the check sees (the tests over the fake libcuda show the same
// drops give wrong losses when the streams really run apart).
func TestStreamScheduleProtocol(t *testing.T) {
	cases := []struct {
		ws          int
		sharding    string
		gpusPerNode int
		bwd         string
		fwd         bool
	}{
		{2, sweeps.FullShard, 0, sweeps.BackwardPre, true},
		{2, sweeps.FullShard, 0, sweeps.BackwardPost, false},
		{2, sweeps.ShardGradOp, 0, sweeps.PrefetchNone, true},
		{4, sweeps.HybridShard, 2, sweeps.BackwardPre, false},
		{2, sweeps.DDP, 0, sweeps.PrefetchNone, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("ws%d-%s-%s-fwd%v", c.ws, c.sharding, c.bwd, c.fwd), func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Sharding, cfg.GPUsPerNode, cfg.BackwardPrefetch, cfg.ForwardPrefetch = c.sharding, c.gpusPerNode, c.bwd, c.fwd
			// Gradient accumulation too: only the last micro-step reduces.
			cfg.BatchPerDevice, cfg.GradAccum = 1, globalBatch/c.ws
			ref := train(t, c.ws, cfg, 3)
			got, all := trainOnStreams(t, c.ws, cfg, 3)
			lines := all[0]
			for r := range c.ws {
				assert.Equal(t, ref.losses[r], got[r], "rank %d: the goroutine path's losses", r)
				assert.Empty(t, protocolViolations(all[r]), "rank %d", r)
				assert.Equal(t, starts(lines), starts(all[r]), "rank %d starts the collectives in rank 0's order (one stream)", r)
			}
			want := "start reduce_scatter"
			if c.sharding == sweeps.DDP {
				want = "start all_reduce"
			}
			assert.Contains(t, lines, want, "the collectives went through the stream schedule")
		})
	}
	cfg := baseConfig(t)
	cfg.Sharding, cfg.BackwardPrefetch, cfg.ForwardPrefetch, cfg.BatchPerDevice = sweeps.FullShard, sweeps.BackwardPre, true, globalBatch/2
	for _, tc := range []struct{ drop, want string }{
		{"gather", "never waits for all-gather event"},
		{"shard", "start all_gather without the comm stream waiting"},
		{"reduce", "start reduce_scatter without the comm stream waiting"},
		{"free", "the full gradient is not freed after the reduce-scatter's event"},
	} {
		t.Run("drop "+tc.drop, func(t *testing.T) {
			t.Setenv(EnvDropWait, tc.drop)
			_, all := trainOnStreams(t, 2, cfg, 1)
			assert.Contains(t, strings.Join(protocolViolations(all[0]), "\n"), tc.want)
		})
	}
	t.Run("a bad drop value", func(t *testing.T) {
		t.Setenv(EnvDropWait, "everything")
		world := newWorld(t, 1)
		reg := withLoggedStreams(t)
		dev := cpu.New(cpu.Options{})
		reg.Store(dev, loggedStreams{dev, &protocolLog{}})
		_, err := New(context.Background(), dev, streamComm{world[0], &protocolLog{}}, cfg)
		require.ErrorContains(t, err, EnvDropWait+`="everything" is not one of gather, shard, reduce, free`)
	})
}

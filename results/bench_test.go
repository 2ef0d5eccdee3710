package results

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// synthRun builds the i-th run of a synthetic sweep: a grid over world size, batch,
// sharding, checkpointing, prefetch, precision and seed, with per-rank reports, 20
// measured steps and OOMs where memory would not fit, normalized as a backend's
// results would be.
func synthRun(sweep string, i int) (sweeps.RunConfig, Metrics) {
	wss := []int{1, 2, 4, 8}
	bss := []int{1, 2, 4, 8, 16}
	acs := []bool{false, true}
	pre := sweeps.BackwardPrefetchValues
	mps := sweeps.MixedPrecisionValues
	k := i
	pick := func(n int) int { v := k % n; k /= n; return v }
	rc := sweeps.RunConfig{Sweep: sweep, Backend: "gotrain", Launcher: "local", Hardware: "h100-sxm",
		Model: "llama-1b", SeqLen: 512, Steps: 20, WarmupSteps: 3, Repeats: 1, Timeout: sweeps.Duration(10 * time.Minute)}
	rc.WorldSize = wss[pick(len(wss))]
	rc.BatchPerDevice = bss[pick(len(bss))]
	rc.Sharding = sweeps.ShardingValues[pick(len(sweeps.ShardingValues))]
	rc.ActivationCheckpointing = acs[pick(len(acs))]
	rc.BackwardPrefetch = pre[pick(len(pre))]
	rc.MixedPrecision = mps[pick(len(mps))]
	rc.Seed = int64(k)
	rc.Nodes, rc.GPUsPerNode, rc.GradAccum = 1, rc.WorldSize, 1
	rc.GlobalBatch = rc.WorldSize * rc.BatchPerDevice
	rc.WrapPolicy = "transformer"
	rc.AssignID()

	res := Result{Status: StatusOK, WorldSize: rc.WorldSize, ModelFlopsPerToken: 7.4e9, PeakFlopsPerS: 989e12,
		Env: Env{GPU: "NVIDIA H100 80GB HBM3", Hosts: []string{"node-0"}, Hardware: rc.Hardware}}
	shardFactor := map[string]float64{sweeps.FullShard: 1 / float64(rc.WorldSize), sweeps.ShardGradOp: 0.5,
		sweeps.HybridShard: 0.6, sweeps.NoShard: 1, sweeps.DDP: 1.05}[rc.Sharding]
	peak := int64((16e9*shardFactor + float64(rc.BatchPerDevice)*2.5e9) * (1 - 0.6*float64(b01(rc.ActivationCheckpointing))))
	if peak > 80e9 {
		res.Status, res.Error = StatusOOM, "CUDA out of memory"
	}
	stepTime := 0.05 * float64(rc.BatchPerDevice) * (1 + 0.1*float64(i%7))
	for s := 0; s < rc.Steps && res.Status == StatusOK; s++ {
		loss := 10.5 - 0.1*float64(s)
		res.Steps = append(res.Steps, Step{Step: s + rc.WarmupSteps, Loss: &loss, StepTimeS: stepTime, Tokens: rc.TokensPerStep()})
		res.MeasuredWallS += stepTime
	}
	for r := 0; r < rc.WorldSize; r++ {
		res.PerRank = append(res.PerRank, RankResult{Rank: r, Host: "node-0", MeasuredWallS: res.MeasuredWallS,
			Tokens: int64(rc.BatchPerDevice*rc.SeqLen) * int64(len(res.Steps)), PeakMemAllocatedBytes: I64(peak * 9 / 10),
			PeakMemReservedBytes: I64(peak)})
	}
	return rc, Normalize(rc, []Result{res})
}

// writeSynthSweep writes n runs the way the store lays them out, without the fsync
// per file that WriteFileAtomic pays (it would make the setup take minutes), and
// appends each to the index as WriteMetrics does.
func writeSynthSweep(dir string, n int) error {
	sd, err := OpenSweep(dir)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		rc, m := synthRun(filepath.Base(dir), i)
		rd := sd.RunDir(rc.ID)
		if err := os.MkdirAll(rd, 0o755); err != nil {
			return err
		}
		for name, v := range map[string]any{RunArgsFile: rc, MetricsFile: m} {
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(rd, name), append(b, '\n'), 0o644); err != nil {
				return err
			}
		}
		if err := sd.appendIndex(rc.ID, rc, m); err != nil {
			return err
		}
	}
	return nil
}

var big struct {
	once sync.Once
	path string // the sweep directory
	tmp  string // the temporary directory to remove, if any
	err  error
}

// benchDirEnv names a directory that keeps the 100,000-run sweep between benchmark
// runs (writing it takes a minute); without it the sweep goes to a temporary
// directory that TestMain removes.
const benchDirEnv = "FSDPBENCH_BENCH_DIR"

// bigSweep is a 100,000-run sweep, written once per test binary.
func bigSweep(b *testing.B) string {
	big.once.Do(func() {
		if keep := os.Getenv(benchDirEnv); keep != "" {
			dir := filepath.Join(keep, "big")
			if _, err := os.Stat(filepath.Join(dir, IndexFile)); err == nil {
				big.path = dir
				return
			}
			big.path, big.err = dir, writeSynthSweep(dir, 100_000)
			return
		}
		big.tmp, big.err = os.MkdirTemp("", "fsdpbench-bench-")
		if big.err == nil {
			big.path = filepath.Join(big.tmp, "big")
			big.err = writeSynthSweep(big.path, 100_000)
		}
	})
	require.NoError(b, big.err)
	return big.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if big.tmp != "" {
		os.RemoveAll(big.tmp)
	}
	os.Exit(code)
}

// cpuSeconds is the CPU time this process has used (user + system). The machine is
// shared, so benchmarks report it beside wall time: it moves less with the load.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// loop runs f b.N times and reports CPU seconds per op.
func loop(b *testing.B, f func()) {
	start := cpuSeconds()
	for b.Loop() {
		f()
	}
	b.ReportMetric((cpuSeconds()-start)/float64(b.N), "cpu-s/op")
}

// BenchmarkLoad100k loads a 100,000-run sweep: through the index (the normal case)
// and by reading every run directory (an index-less sweep, the fallback).
func BenchmarkLoad100k(b *testing.B) {
	dir := bigSweep(b)
	b.Run("index", func(b *testing.B) {
		loop(b, func() {
			runs, err := Load(dir)
			require.NoError(b, err)
			require.Len(b, runs, 100_000)
		})
	})
	b.Run("scan", func(b *testing.B) {
		idx := filepath.Join(dir, IndexFile)
		require.NoError(b, os.Rename(idx, idx+".off"))
		defer os.Rename(idx+".off", idx)
		loop(b, func() {
			runs, err := Load(dir)
			require.NoError(b, err)
			require.Len(b, runs, 100_000)
		})
	})
}

// BenchmarkReport100k renders the loaded 100,000 runs in each format, as the default
// one-row-per-run report and as a pivot.
func BenchmarkReport100k(b *testing.B) {
	runs, err := Load(bigSweep(b))
	require.NoError(b, err)
	for _, format := range Formats {
		b.Run(format, func(b *testing.B) {
			loop(b, func() { require.NoError(b, Report(io.Discard, runs, ReportOptions{Format: format})) })
		})
	}
	b.Run("pivot", func(b *testing.B) {
		loop(b, func() {
			require.NoError(b, Report(io.Discard, runs, ReportOptions{Rows: []string{"sharding"}, Cols: []string{"world_size"}}))
		})
	})
	b.Run("export-csv", func(b *testing.B) {
		loop(b, func() { require.NoError(b, WriteCSV(io.Discard, runs)) })
	})
}

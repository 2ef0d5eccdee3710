package harness

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/harness/sampler"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// gpus is a sampler.Source of n fake GPUs; device d always has (d+1) GiB in use,
// reports power, and knows nothing of utilization, PCIe or NVLink.
type gpus struct {
	n     int
	reads atomic.Int64
}

func (g *gpus) Devices() int { return g.n }

func (g *gpus) Info(int) sampler.DeviceInfo {
	return sampler.DeviceInfo{Name: "Fake H100", Driver: "550.54.15", CUDA: "12.4"}
}

func (g *gpus) Sample(_ context.Context, d int) (sampler.Reading, error) {
	g.reads.Add(1)
	return sampler.Reading{MemUsedBytes: results.I64(int64(d+1) << 30), PowerW: results.F64(100)}, nil
}

func readSamples(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

func TestSweepSamplesTheRunsGPUs(t *testing.T) {
	be := &fake{name: "fake", needsGPU: true}
	be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		time.Sleep(30 * time.Millisecond) // a few sampling intervals
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	// Three GPUs on the host, two handed to the run: only those are sampled.
	opts.Devices = launch.NewLocal(3)
	opts.DeviceSource = &gpus{n: 3}
	opts.SampleInterval = 5 * time.Millisecond
	p := plan("sampled", 1)
	p.Runs[0].Repeats = 2
	p.Runs[0].AssignID()
	rc := p.Runs[0]

	sum, err := Run(t.Context(), p, opts)
	require.NoError(t, err)
	require.Equal(t, 1, sum.OK)
	dir := filepath.Join(opts.ResultsDir, "sampled")

	m := readMetrics(t, dir, rc.ID)
	require.NotNil(t, m.PeakDeviceMemBytes, "the NVML peak must fill peak_device_mem_bytes")
	assert.Equal(t, int64(2<<30), *m.PeakDeviceMemBytes)
	assert.Equal(t, "Fake H100", m.Env.GPU)
	assert.Equal(t, "550.54.15", m.Env.Driver)
	assert.Equal(t, "12.4", m.Env.CUDA)

	rows := readSamples(t, filepath.Join(dir, results.RunsDir, rc.ID, results.SamplesFile))
	require.Equal(t, sampler.CSVHeader, rows[0])
	require.Greater(t, len(rows), 4, "at least one reading of each device in each repeat")
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	var devices, repeats []string
	for _, r := range rows[1:] {
		devices = append(devices, r[col["device"]])
		repeats = append(repeats, r[col["repeat"]])
		assert.Empty(t, r[col["util_gpu_pct"]], "unknown figures are empty cells")
		assert.Equal(t, "100.000", r[col["power_w"]])
	}
	slices.Sort(devices)
	assert.Equal(t, []string{"0", "1"}, slices.Compact(devices), "only the run's devices")
	slices.Sort(repeats)
	assert.Equal(t, []string{"0", "1"}, slices.Compact(repeats), "both repeats")
}

func TestBackendsOwnPeakWins(t *testing.T) {
	be := &fake{name: "fake", needsGPU: true}
	be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		res := okResult(rc, emit)
		res.PerRank[1].PeakDeviceMemBytes = results.I64(5 << 30)
		res.Env.GPU = "what torch saw"
		return res, nil
	}
	opts, _ := options(t, be)
	opts.Devices = launch.NewLocal(2)
	opts.DeviceSource = &gpus{n: 2}
	p := plan("backend-peak", 1)

	_, err := Run(t.Context(), p, opts)
	require.NoError(t, err)
	dir := filepath.Join(opts.ResultsDir, "backend-peak")
	m := readMetrics(t, dir, p.Runs[0].ID)
	require.NotNil(t, m.PeakDeviceMemBytes)
	assert.Equal(t, int64(5<<30), *m.PeakDeviceMemBytes)
	assert.Equal(t, "what torch saw", m.Env.GPU)
	assert.Equal(t, "12.4", m.Env.CUDA, "what the backend left empty is filled")
	assert.FileExists(t, filepath.Join(dir, results.RunsDir, p.Runs[0].ID, results.SamplesFile))
}

func TestUnassignedRunsSampleEveryGPUUnlessOnTheCPU(t *testing.T) {
	// torchrun places its ranks itself (no devices from the harness): a GPU run is
	// sampled on every device, a CPU run on none.
	for _, tc := range []struct {
		hardware string
		want     bool
	}{{"h100-sxm", true}, {"cpu", false}} {
		t.Run(tc.hardware, func(t *testing.T) {
			be := &fake{name: "fake"}
			opts, _ := options(t, be)
			src := &gpus{n: 2}
			opts.DeviceSource = src
			p := plan("unassigned", 1)
			p.Runs[0].Hardware = tc.hardware
			p.Runs[0].AssignID()

			_, err := Run(t.Context(), p, opts)
			require.NoError(t, err)
			dir := filepath.Join(opts.ResultsDir, "unassigned")
			m := readMetrics(t, dir, p.Runs[0].ID)
			path := filepath.Join(dir, results.RunsDir, p.Runs[0].ID, results.SamplesFile)
			if !tc.want {
				assert.NoFileExists(t, path)
				assert.Nil(t, m.PeakDeviceMemBytes)
				assert.Zero(t, src.reads.Load())
				return
			}
			require.NotNil(t, m.PeakDeviceMemBytes)
			assert.Equal(t, int64(2<<30), *m.PeakDeviceMemBytes)
			assert.GreaterOrEqual(t, len(readSamples(t, path)), 3)
		})
	}
}

// simPlan is a small sim sweep, parsed as the CLI does.
func simPlan(t *testing.T, name string) *sweeps.Plan {
	t.Helper()
	p, err := sweeps.Parse([]byte(`name: `+name+`
backend: sim
hardware: h100-sxm
model: gpt2-124m
seq_len: 1024
steps: 3
grid:
  world_size: [1, 2]
`), "sim.yaml", sweeps.Options{})
	require.NoError(t, err)
	return p
}

func TestPredictedRunsKeepNoSamples(t *testing.T) {
	// The GPUs' readings say nothing about predicted figures: a sim run on a host
	// with GPUs gets no samples.csv and no NVML peak.
	reg := &backends.Registry{}
	require.NoError(t, reg.Register(sim.New()))
	src := &gpus{n: 2}
	p := simPlan(t, "predicted")
	sum, err := Run(t.Context(), p, Options{ResultsDir: t.TempDir(), Registry: reg, Progress: ProgressNone, DeviceSource: src, Devices: launch.NewLocal(2)})
	require.NoError(t, err)
	require.Equal(t, 2, sum.OK)
	assert.Positive(t, src.reads.Load(), "the sim runs were sampled, then the samples dropped")
	unsampled, err := Run(t.Context(), p, Options{ResultsDir: t.TempDir(), Registry: reg, Progress: ProgressNone, SampleInterval: -1})
	require.NoError(t, err)
	for i, o := range sum.Runs {
		assert.True(t, o.Metrics.Predicted)
		// sim predicts peak_device_mem_bytes itself; the samples must not touch it.
		require.NotNil(t, o.Metrics.PeakDeviceMemBytes)
		assert.Equal(t, *unsampled.Runs[i].Metrics.PeakDeviceMemBytes, *o.Metrics.PeakDeviceMemBytes)
		assert.Empty(t, o.Metrics.Env.CUDA)
		assert.NoFileExists(t, filepath.Join(sum.Dir, results.RunsDir, o.Config.ID, results.SamplesFile))
	}
}

func TestSamplingOff(t *testing.T) {
	be := &fake{name: "fake", needsGPU: true}
	opts, _ := options(t, be)
	opts.Devices = launch.NewLocal(2)
	src := &gpus{n: 2}
	opts.DeviceSource = src
	opts.SampleInterval = -1
	p := plan("off", 1)
	_, err := Run(t.Context(), p, opts)
	require.NoError(t, err)
	assert.Zero(t, src.reads.Load())
	assert.NoFileExists(t, filepath.Join(opts.ResultsDir, "off", results.RunsDir, p.Runs[0].ID, results.SamplesFile))
}

func TestRerunRemovesThePreviousSamples(t *testing.T) {
	be := &fake{name: "fake", needsGPU: true}
	opts, _ := options(t, be)
	opts.Devices = launch.NewLocal(2)
	opts.DeviceSource = &gpus{n: 2}
	p := plan("rerun-samples", 1)
	_, err := Run(t.Context(), p, opts)
	require.NoError(t, err)
	path := filepath.Join(opts.ResultsDir, "rerun-samples", results.RunsDir, p.Runs[0].ID, results.SamplesFile)
	require.FileExists(t, path)

	opts.Rerun, opts.SampleInterval = true, -1
	_, err = Run(t.Context(), p, opts)
	require.NoError(t, err)
	assert.NoFileExists(t, path, "a rerun without sampling must not keep the last attempt's samples")
}

// TestNoDriverMeansNoSamples runs sweeps with the default source, NVML, on a host
// without the driver: nothing fails and nothing is sampled.
func TestNoDriverMeansNoSamples(t *testing.T) {
	if m, err := sampler.OpenNVML(); err == nil {
		require.NoError(t, m.Close())
		t.Skip("this host has an NVIDIA driver; the test is about hosts without one")
	}
	be := &fake{name: "fake", needsGPU: true}
	opts, _ := options(t, be)
	opts.Devices = launch.NewLocal(2) // devices exist as far as the launcher knows
	p := plan("no-driver", 1)
	sum, err := Run(t.Context(), p, opts)
	require.NoError(t, err)
	require.Equal(t, 1, sum.OK)
	m := readMetrics(t, sum.Dir, p.Runs[0].ID)
	assert.Nil(t, m.PeakDeviceMemBytes)
	assert.Empty(t, m.Env.GPU)
	assert.NoFileExists(t, filepath.Join(sum.Dir, results.RunsDir, p.Runs[0].ID, results.SamplesFile))

	reg := &backends.Registry{}
	require.NoError(t, reg.Register(sim.New()))
	sum, err = Run(t.Context(), simPlan(t, "no-driver-sim"), Options{ResultsDir: t.TempDir(), Registry: reg, Progress: ProgressNone})
	require.NoError(t, err)
	require.Equal(t, 2, sum.OK)
	for _, o := range sum.Runs {
		assert.Empty(t, o.Metrics.Env.CUDA)
		assert.NoFileExists(t, filepath.Join(sum.Dir, results.RunsDir, o.Config.ID, results.SamplesFile))
	}
}

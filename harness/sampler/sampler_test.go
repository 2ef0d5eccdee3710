package sampler

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fsdpbench/fsdpbench/results"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestMain fails the package if any test leaves a sampling goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a Source whose readings each test scripts per device and call.
type fakeSource struct {
	n    int
	read func(ctx context.Context, device, call int) (Reading, error)

	mu    sync.Mutex
	calls map[int]int
}

func (f *fakeSource) Devices() int { return f.n }

func (f *fakeSource) Info(device int) DeviceInfo {
	return DeviceInfo{Name: "Fake GPU", Driver: "1.2", CUDA: "12.4"}
}

func (f *fakeSource) Sample(ctx context.Context, device int) (Reading, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[int]int{}
	}
	call := f.calls[device]
	f.calls[device]++
	f.mu.Unlock()
	return f.read(ctx, device, call)
}

func (f *fakeSource) callsTo(device int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[device]
}

// memOnly reports device's memory as (device+1) * 100 * (call+1) bytes: growing,
// and different per device.
func memOnly(_ context.Context, device, call int) (Reading, error) {
	return Reading{MemUsedBytes: results.I64(int64((device + 1) * 100 * (call + 1)))}, nil
}

func TestSamplerReadsEveryIntervalAndReportsPeaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{n: 2, read: memOnly}
		// Device 7 is not the source's: it is left out rather than failing each tick.
		s := Start(t.Context(), src, []int{0, 1, 7}, 500*time.Millisecond)
		require.NotNil(t, s)
		time.Sleep(1250 * time.Millisecond) // readings at 0, 0.5 and 1.0 s
		rep := s.Stop()

		require.Len(t, rep.Samples, 6)
		var times []float64
		for _, smp := range rep.Samples {
			if smp.Device == 0 {
				times = append(times, smp.TimeS)
			}
		}
		assert.Equal(t, []float64{0, 0.5, 1}, times)
		assert.Equal(t, map[int]int64{0: 300, 1: 600}, rep.PeakMemBytes)
		require.NotNil(t, rep.PeakDeviceMemBytes())
		assert.Equal(t, int64(600), *rep.PeakDeviceMemBytes())
		assert.Zero(t, rep.Failed)
		require.NoError(t, rep.Err)
		assert.Zero(t, src.callsTo(7))

		// Stopped means stopped: no reading after Stop, and Stop can be repeated.
		time.Sleep(2 * time.Second)
		assert.Equal(t, 3, src.callsTo(0))
		assert.Len(t, s.Stop().Samples, 6)
	})
}

func TestSamplerDefaultInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{n: 1, read: memOnly}
		s := Start(t.Context(), src, []int{0}, 0)
		time.Sleep(DefaultInterval*4 + DefaultInterval/2)
		assert.Len(t, s.Stop().Samples, 5)
	})
}

func TestSamplerKeepsSamplingWhenADeviceFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lost := errors.New("GPU is lost")
		src := &fakeSource{n: 2, read: func(ctx context.Context, device, call int) (Reading, error) {
			if device == 1 {
				return Reading{}, lost
			}
			return memOnly(ctx, device, call)
		}}
		s := Start(t.Context(), src, []int{0, 1}, time.Second)
		time.Sleep(2500 * time.Millisecond)
		rep := s.Stop()
		assert.Len(t, rep.Samples, 3)
		assert.Equal(t, 3, rep.Failed)
		require.ErrorIs(t, rep.Err, lost)
		assert.Contains(t, rep.Err.Error(), "device 1")
		assert.Equal(t, map[int]int64{0: 300}, rep.PeakMemBytes)
	})
}

func TestSamplerStopsPromptlyWhenCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		src := &fakeSource{n: 1, read: memOnly}
		s := Start(ctx, src, []int{0}, time.Hour)
		synctest.Wait() // the first reading is taken, the loop waits for its tick
		start := time.Now()
		cancel()
		synctest.Wait()
		select {
		case <-s.done:
		default:
			t.Fatal("the sampling goroutine is still running after its context was cancelled")
		}
		assert.Len(t, s.Stop().Samples, 1)
		assert.Zero(t, time.Since(start), "stopping waited for the next tick")
	})
}

func TestSamplerStopInterruptsASlowReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A reading that only returns when its context ends (a source that honours
		// ctx): Stop must cancel it rather than wait.
		src := &fakeSource{n: 1, read: func(ctx context.Context, _, _ int) (Reading, error) {
			<-ctx.Done()
			return Reading{}, ctx.Err()
		}}
		s := Start(t.Context(), src, []int{0}, time.Second)
		synctest.Wait()
		start := time.Now()
		rep := s.Stop()
		assert.Zero(t, time.Since(start))
		assert.Empty(t, rep.Samples)
		assert.Equal(t, 1, rep.Failed)
	})
}

func TestStartWithNothingToSample(t *testing.T) {
	src := &fakeSource{n: 2, read: memOnly}
	for name, s := range map[string]*Sampler{
		"no source":         Start(t.Context(), nil, []int{0}, time.Second),
		"no device":         Start(t.Context(), src, nil, time.Second),
		"only unknown":      Start(t.Context(), src, []int{2, -1}, time.Second),
		"sampling off (<0)": Start(t.Context(), src, []int{0}, -1),
	} {
		assert.Nil(t, s, name)
		rep := s.Stop()
		assert.Empty(t, rep.Samples, name)
		assert.Nil(t, rep.PeakDeviceMemBytes(), name)
	}
	assert.Zero(t, src.callsTo(0))
}

func TestPeakWithoutMemoryReadingsIsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{n: 1, read: func(context.Context, int, int) (Reading, error) {
			return Reading{PowerW: results.F64(70)}, nil
		}}
		rep := Start(t.Context(), src, []int{0}, time.Second).Stop()
		require.Len(t, rep.Samples, 1)
		assert.Nil(t, rep.PeakMemBytes)
		assert.Nil(t, rep.PeakDeviceMemBytes(), "no memory reading must not read as a 0-byte peak")
	})
}

func csvSamples() []Sample {
	return []Sample{
		{TimeS: 0, Repeat: 0, Device: 0, Reading: Reading{
			MemUsedBytes: results.I64(1 << 30), UtilGPUPct: results.F64(97), PowerW: results.F64(612.345),
			PCIeTxBytesPerS: results.F64(1024 * 1500), PCIeRxBytesPerS: results.F64(0),
			NVLinkTxBytesPerS: results.F64(123456789.4), NVLinkRxBytesPerS: results.F64(98765432.6),
		}},
		// A MIG instance or an older GPU: only memory is known; the rest stays empty.
		{TimeS: 0.5004, Repeat: 0, Device: 1, Reading: Reading{MemUsedBytes: results.I64(2 << 30)}},
		{TimeS: 0, Repeat: 1, Device: 0, Reading: Reading{UtilGPUPct: results.F64(0), PowerW: results.F64(70)}},
	}
}

func TestWriteCSVGolden(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, csvSamples()))
	golden := filepath.Join("testdata", "samples.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./harness/sampler -update to create it")
	assert.Equal(t, string(want), buf.String())
}

func TestWriteCSVLeavesUnknownCellsEmpty(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, csvSamples()))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 4)
	assert.Equal(t, CSVHeader, rows[0])
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	// Measured zeros stay zeros...
	assert.Equal(t, "0", rows[1][col["pcie_rx_bytes_per_s"]])
	assert.Equal(t, "0", rows[3][col["util_gpu_pct"]])
	// ...and unknowns are empty.
	for _, h := range []string{"util_gpu_pct", "power_w", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s"} {
		assert.Empty(t, rows[2][col[h]], h)
	}
	assert.Empty(t, rows[3][col["mem_used_bytes"]])
	assert.Equal(t, "1", rows[3][col["repeat"]])
}

func TestWriteFileIsAtomicAndReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), results.SamplesFile)
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	require.NoError(t, WriteFile(path, csvSamples()[:1]))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	require.NoError(t, err)
	assert.Len(t, rows, 2)
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	require.NoError(t, err)
	assert.Empty(t, left, "temporary files left behind")

	err = WriteFile(filepath.Join(t.TempDir(), "missing", "samples.csv"), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "samples.csv")
}

func TestCUDAVisible(t *testing.T) {
	uuids := []string{"GPU-aaaa1111", "GPU-bbbb2222", "GPU-bbbb3333", "GPU-cccc4444"}
	idx := func(is ...int) []target {
		var out []target
		for _, i := range is {
			out = append(out, target{index: i})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		value string
		set   bool
		want  []target
	}{
		{"unset: every device", "", false, idx(0, 1, 2, 3)},
		{"set empty: none", "", true, nil},
		{"indices in the given order", "3, 1", true, idx(3, 1)},
		{"stops at an index out of range", "0,9,1", true, idx(0)},
		{"stops at a negative index", "1,-1,2", true, idx(1)},
		{"full UUID", "GPU-cccc4444", true, idx(3)},
		{"UUID prefix with and without GPU-", "GPU-aa,cccc", true, idx(0, 3)},
		{"ambiguous prefix stops", "0,GPU-bbbb,1", true, idx(0)},
		{"unknown UUID stops", "GPU-ffff,0", true, nil},
		{"MIG instances are looked up by UUID", "MIG-1234-abcd,2", true, []target{{index: -1, uuid: "MIG-1234-abcd"}, {index: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, cudaVisible(tc.value, tc.set, uuids))
		})
	}
}

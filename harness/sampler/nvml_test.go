//go:build cgo

package sampler

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// fakeGPU is a mocked NVML device; zero-valued figures answer NOT_SUPPORTED.
type fakeGPU struct {
	uuid, name  string
	used        uint64
	util        uint32
	powerMW     uint32
	pcieKB      [2]uint32 // tx, rx
	links       uint64    // NVLink links; 0 answers NOT_SUPPORTED to the NVLink fields
	nvlinkKiB   [2]uint64 // cumulative tx, rx
	nvlinkAtUs  int64
	unsupported bool // a MIG instance: only memory is known
	smMHz       uint32
	throttle    uint64   // clock throttle reason bits
	pids        []uint32 // compute processes on the device
}

func (g *fakeGPU) device() *mock.Device {
	ns := func(ok bool) nvml.Return {
		if ok {
			return nvml.SUCCESS
		}
		return nvml.ERROR_NOT_SUPPORTED
	}
	return &mock.Device{
		GetUUIDFunc:             func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
		GetNameFunc:             func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
		GetMemoryInfoFunc:       func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 80 << 30, Used: g.used}, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: g.util}, ns(!g.unsupported) },
		GetPowerUsageFunc:       func() (uint32, nvml.Return) { return g.powerMW, ns(!g.unsupported) },
		GetPcieThroughputFunc: func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			return g.pcieKB[c], ns(!g.unsupported)
		},
		GetClockInfoFunc: func(nvml.ClockType) (uint32, nvml.Return) { return g.smMHz, ns(!g.unsupported && g.smMHz > 0) },
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, nvml.Return) {
			return g.throttle, ns(!g.unsupported && g.smMHz > 0)
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			var ps []nvml.ProcessInfo
			for _, p := range g.pids {
				ps = append(ps, nvml.ProcessInfo{Pid: p})
			}
			return ps, ns(!g.unsupported)
		},
		GetFieldValuesFunc: func(vs []nvml.FieldValue) nvml.Return {
			for i := range vs {
				var v uint64
				switch vs[i].FieldId {
				case nvml.FI_DEV_NVLINK_LINK_COUNT:
					v = g.links
				case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
					v = g.nvlinkKiB[0]
				case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
					v = g.nvlinkKiB[1]
				}
				vs[i].NvmlReturn = uint32(ns(g.links > 0))
				vs[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				vs[i].Timestamp = g.nvlinkAtUs
				binary.LittleEndian.PutUint64(vs[i].Value[:], v)
			}
			return nvml.SUCCESS
		},
	}
}

// fakeNVML is a mocked NVML library over gpus (and MIG instances by UUID).
func fakeNVML(gpus []*fakeGPU, mig map[string]*fakeGPU) (*mock.Interface, *int) {
	shutdowns := 0
	devs := make([]*mock.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = g.device()
	}
	return &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { shutdowns++; return nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12040, nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			if g, ok := mig[u]; ok {
				return g.device(), nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}, &shutdowns
}

func TestNVMLWithoutTheLibraryIsNoSource(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	m, err := openNVML(lib, "", false)
	require.Error(t, err)
	assert.Nil(t, m)
	assert.Contains(t, err.Error(), "ERROR_LIBRARY_NOT_FOUND")
	assert.Contains(t, err.Error(), "GPU sampling is off")
	assert.Empty(t, lib.ShutdownCalls(), "NVML was never initialized, so it must not be shut down")
}

func TestNVMLWithNoDevices(t *testing.T) {
	lib, shutdowns := fakeNVML(nil, nil)
	_, err := openNVML(lib, "", false)
	require.ErrorContains(t, err, "no devices")
	assert.Equal(t, 1, *shutdowns)

	lib, shutdowns = fakeNVML([]*fakeGPU{{uuid: "GPU-a"}}, nil)
	_, err = openNVML(lib, "GPU-zzz", true)
	require.ErrorContains(t, err, `CUDA_VISIBLE_DEVICES="GPU-zzz"`)
	assert.Equal(t, 1, *shutdowns)
}

func TestNVMLSamplesTheVisibleDevices(t *testing.T) {
	h100 := &fakeGPU{
		uuid: "GPU-1111", name: "NVIDIA H100 80GB HBM3", used: 40 << 30, util: 93, powerMW: 612345,
		pcieKB: [2]uint32{1500, 20}, links: 18, nvlinkKiB: [2]uint64{1000, 4000}, nvlinkAtUs: 1_000_000,
	}
	pcie := &fakeGPU{uuid: "GPU-2222", name: "NVIDIA H100 PCIe", used: 1 << 30, util: 0, powerMW: 70000}
	mig := &fakeGPU{name: "NVIDIA H100 MIG 1g.10gb", used: 5 << 30, unsupported: true}
	lib, shutdowns := fakeNVML([]*fakeGPU{pcie, h100}, map[string]*fakeGPU{"MIG-abc": mig})

	// The run sees NVML's device 1 as its device 0, then device 0, then a MIG instance.
	m, err := openNVML(lib, "1,GPU-2222,MIG-abc", true)
	require.NoError(t, err)
	require.Equal(t, 3, m.Devices())
	assert.Equal(t, DeviceInfo{Name: "NVIDIA H100 80GB HBM3", Driver: "550.54.15", CUDA: "12.4"}, m.Info(0))
	assert.Equal(t, "NVIDIA H100 PCIe", m.Info(1).Name)
	assert.Equal(t, DeviceInfo{}, m.Info(3))

	r, err := m.Sample(t.Context(), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(40<<30), *r.MemUsedBytes)
	assert.InDelta(t, 93, *r.UtilGPUPct, 0)
	assert.InDelta(t, 612.345, *r.PowerW, 1e-9)
	assert.InDelta(t, 1500*1024, *r.PCIeTxBytesPerS, 0)
	assert.InDelta(t, 20*1024, *r.PCIeRxBytesPerS, 0)
	assert.Nil(t, r.NVLinkTxBytesPerS, "a rate needs two readings of the counters")

	// Half a second later 512 KiB went out and 1 MiB came in over NVLink.
	h100.nvlinkKiB = [2]uint64{1512, 5024}
	h100.nvlinkAtUs += 500_000
	r, err = m.Sample(t.Context(), 0)
	require.NoError(t, err)
	require.NotNil(t, r.NVLinkTxBytesPerS)
	assert.InDelta(t, 512*1024/0.5, *r.NVLinkTxBytesPerS, 1e-6)
	assert.InDelta(t, 1024*1024/0.5, *r.NVLinkRxBytesPerS, 1e-6)

	// Counters that went backwards (a reset) give no rate rather than a huge one.
	h100.nvlinkKiB = [2]uint64{0, 0}
	h100.nvlinkAtUs += 500_000
	r, err = m.Sample(t.Context(), 0)
	require.NoError(t, err)
	assert.Nil(t, r.NVLinkTxBytesPerS)

	// No NVLink: the fields stay unknown, and a measured 0 % stays 0.
	r, err = m.Sample(t.Context(), 1)
	require.NoError(t, err)
	assert.Nil(t, r.NVLinkTxBytesPerS)
	assert.Nil(t, r.NVLinkRxBytesPerS)
	require.NotNil(t, r.UtilGPUPct)
	assert.Zero(t, *r.UtilGPUPct)

	// A MIG instance answers memory only.
	r, err = m.Sample(t.Context(), 2)
	require.NoError(t, err)
	assert.Equal(t, Reading{MemUsedBytes: r.MemUsedBytes}, r)
	assert.Equal(t, int64(5<<30), *r.MemUsedBytes)

	_, err = m.Sample(t.Context(), 3)
	require.ErrorContains(t, err, "no device 3")

	require.NoError(t, m.Close())
	assert.Equal(t, 1, *shutdowns)
}

func TestNVMLDeviceThatAnswersNothing(t *testing.T) {
	dev := &mock.Device{
		GetUUIDFunc:                         func() (string, nvml.Return) { return "GPU-1", nvml.SUCCESS },
		GetNameFunc:                         func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST },
		GetFieldValuesFunc:                  func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_GPU_IS_LOST },
		GetMemoryInfoFunc:                   func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST },
		GetUtilizationRatesFunc:             func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST },
		GetPowerUsageFunc:                   func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
		GetPcieThroughputFunc:               func(nvml.PcieUtilCounter) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
		GetClockInfoFunc:                    func(nvml.ClockType) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
		GetComputeRunningProcessesFunc:      func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST },
	}
	lib := &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN },
	}
	m, err := openNVML(lib, "", false)
	require.NoError(t, err)
	assert.Equal(t, DeviceInfo{}, m.Info(0), "unknown driver facts stay empty")
	_, err = m.Sample(t.Context(), 0)
	require.ErrorContains(t, err, "ERROR_GPU_IS_LOST")
}

func TestFieldUint(t *testing.T) {
	fv := func(typ nvml.ValueType, v uint64) nvml.FieldValue {
		f := nvml.FieldValue{ValueType: uint32(typ)}
		binary.LittleEndian.PutUint64(f.Value[:], v)
		return f
	}
	for _, tc := range []struct {
		name string
		f    nvml.FieldValue
		want uint64
		ok   bool
	}{
		{"unsigned int", fv(nvml.VALUE_TYPE_UNSIGNED_INT, 18), 18, true},
		{"unsigned long long", fv(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 1<<40), 1 << 40, true},
		{"signed long long", fv(nvml.VALUE_TYPE_SIGNED_LONG_LONG, 7), 7, true},
		{"negative", fv(nvml.VALUE_TYPE_SIGNED_INT, 0xffffffff), 0, false},
		{"double is not an integer", fv(nvml.VALUE_TYPE_DOUBLE, 1), 0, false},
		{"field not supported", nvml.FieldValue{NvmlReturn: uint32(nvml.ERROR_NOT_SUPPORTED)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := fieldUint(tc.f)
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

// TestOpenNVMLOnThisHost opens the real library: without a driver that must be a
// quiet "no source"; with one, device 0's memory must read. Set
// FSDPBENCH_REQUIRE_NVML=1 on GPU machines to fail when NVML does not open.
func TestOpenNVMLOnThisHost(t *testing.T) {
	m, err := OpenNVML()
	if err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_NVML") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_NVML=1 but NVML did not open: %v", err)
		}
		assert.Nil(t, m)
		assert.Contains(t, err.Error(), "GPU sampling is off")
		return
	}
	defer func() { require.NoError(t, m.Close()) }()
	require.Positive(t, m.Devices())
	r, err := m.Sample(t.Context(), 0)
	require.NoError(t, err)
	require.NotNil(t, r.MemUsedBytes)
	assert.Positive(t, *r.MemUsedBytes)
	assert.NotEmpty(t, m.Info(0).Name)
	t.Logf("device 0: %+v, mem used %d B", m.Info(0), *r.MemUsedBytes)
}

// TestNVMLMachineState: a reading carries the SM clock, the throttle reasons that
// slow a run (not idle) and the processes on the device that are not fsdpbench's;
// Apply summarizes them into the run's env.machine (issue 29).
func TestNVMLMachineState(t *testing.T) {
	if _, err := os.Stat("/proc/1/stat"); err != nil {
		t.Skip("attributes processes through /proc")
	}
	self := uint32(os.Getpid())
	g := &fakeGPU{uuid: "GPU-1", name: "NVIDIA H100 80GB HBM3", used: 1 << 30, smMHz: 1980,
		throttle: nvml.ClocksThrottleReasonGpuIdle, pids: []uint32{self}}
	lib, _ := fakeNVML([]*fakeGPU{g}, nil)
	m, err := openNVML(lib, "", false)
	require.NoError(t, err)

	var samples []Sample
	read := func(at float64) Reading {
		r, err := m.Sample(t.Context(), 0)
		require.NoError(t, err)
		samples = append(samples, Sample{TimeS: at, Reading: r})
		return r
	}
	r := read(0)
	assert.InDelta(t, 1980, *r.SMClockMHz, 0)
	assert.True(t, r.ThrottleKnown)
	assert.Empty(t, r.Throttle, "idle is no slowdown")
	require.NotNil(t, r.OtherProcesses)
	assert.Equal(t, 0, *r.OtherProcesses, "fsdpbench's own process is not other")

	// Another tenant (pid 1: visible here, not ours) arrives; the clocks drop for heat.
	g.pids, g.smMHz, g.throttle = []uint32{self, 1}, 1410, nvml.ClocksThrottleReasonHwThermalSlowdown|nvml.ClocksThrottleReasonSwPowerCap
	r = read(0.5)
	assert.Equal(t, []string{"sw_power_cap", "hw_thermal"}, r.Throttle)
	assert.Equal(t, 1, *r.OtherProcesses)
	read(1.0)

	// A PID from another namespace: no attribution, not a guess.
	g.pids = []uint32{1 << 30}
	r = read(1.5)
	assert.Nil(t, r.OtherProcesses)

	res := results.Result{Status: results.StatusOK, Env: results.Env{Machine: &results.Machine{Repeats: 1, CPUs: 8}}}
	require.True(t, Report{Samples: samples}.Apply(&res, 0))
	x := res.Env.Machine
	assert.Equal(t, 8, x.CPUs, "the host's figures stay")
	assert.InDelta(t, 1410, *x.GPUSMClockMHz, 0, "the median SM clock")
	assert.InDelta(t, 0.75, *x.GPUThrottledShare, 1e-12)
	assert.Equal(t, []string{"sw_power_cap", "hw_thermal"}, x.GPUThrottle)
	assert.Equal(t, 1, *x.GPUOtherProcesses)
}

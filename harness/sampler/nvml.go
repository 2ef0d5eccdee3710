//go:build cgo

package sampler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/fsdpbench/fsdpbench/results"
)

// NVML is a Source that reads the devices through the NVIDIA driver's NVML
// library (libnvidia-ml.so.1, loaded at run time: the binary runs without it).
type NVML struct {
	lib  nvml.Interface
	devs []nvml.Device
	info []DeviceInfo
	// nvlink says, per device, whether it has NVLink links; only those report
	// NVLink throughput (a GPU without links would report a meaningless 0).
	nvlink []bool

	mu   sync.Mutex
	prev []nvlinkCount // per device: the last NVLink counters, for rates
}

// nvlinkCount is a reading of a device's cumulative NVLink data counters.
type nvlinkCount struct {
	ok     bool
	tx, rx uint64 // KiB
	atUs   int64  // NVML timestamp, microseconds
}

// OpenNVML loads NVML and finds the devices CUDA_VISIBLE_DEVICES shows. The error
// says why there is nothing to sample (no driver, no device); callers that sample
// when they can treat it as "no source", not as a failure. Close the NVML when done.
func OpenNVML() (*NVML, error) {
	visible, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	return openNVML(nvml.New(), visible, set)
}

func openNVML(lib nvml.Interface, visible string, set bool) (*NVML, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML is not available (%v); GPU sampling is off", ret)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		lib.Shutdown()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML lists no devices (%v); GPU sampling is off", ret)
		}
		return nil, errors.New("NVML lists no devices; GPU sampling is off")
	}
	all := make([]nvml.Device, n)
	uuids := make([]string, n)
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("NVML device %d: %v; GPU sampling is off", i, ret)
		}
		all[i] = d
		uuids[i], _ = d.GetUUID() // an unknown UUID only stops UUID entries from matching
	}

	m := &NVML{lib: lib}
	driver, _ := lib.SystemGetDriverVersion()
	var cuda string
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS && v > 0 {
		cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10) // 12040 -> 12.4
	}
	for _, t := range cudaVisible(visible, set, uuids) {
		var d nvml.Device
		if t.index >= 0 {
			d = all[t.index]
		} else if h, ret := lib.DeviceGetHandleByUUID(t.uuid); ret == nvml.SUCCESS {
			d = h
		} else {
			break // CUDA stops at the first entry that names no device
		}
		name, _ := d.GetName()
		m.devs = append(m.devs, d)
		m.info = append(m.info, DeviceInfo{Name: name, Driver: driver, CUDA: cuda})
		m.nvlink = append(m.nvlink, hasNVLink(d))
	}
	if len(m.devs) == 0 {
		lib.Shutdown()
		return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%q names none of NVML's %d devices; GPU sampling is off", visible, n)
	}
	m.prev = make([]nvlinkCount, len(m.devs))
	return m, nil
}

func hasNVLink(d nvml.Device) bool {
	v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_LINK_COUNT}}
	if d.GetFieldValues(v) != nvml.SUCCESS {
		return false
	}
	n, ok := fieldUint(v[0])
	return ok && n > 0
}

// Close releases NVML.
func (m *NVML) Close() error {
	if ret := m.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %v", ret)
	}
	return nil
}

// Devices is how many devices CUDA_VISIBLE_DEVICES shows.
func (m *NVML) Devices() int { return len(m.devs) }

// Info names device, its driver and the CUDA version the driver supports.
func (m *NVML) Info(device int) DeviceInfo {
	if device < 0 || device >= len(m.info) {
		return DeviceInfo{}
	}
	return m.info[device]
}

// Sample reads device. Each figure the driver refuses (not supported on this GPU,
// a MIG instance, no permission) stays nil; the error is for a device that gave
// nothing at all.
func (m *NVML) Sample(_ context.Context, device int) (Reading, error) {
	if device < 0 || device >= len(m.devs) {
		return Reading{}, fmt.Errorf("no device %d (NVML sees %d)", device, len(m.devs))
	}
	d := m.devs[device]
	var r Reading
	var first nvml.Return = nvml.SUCCESS
	got := false
	note := func(ret nvml.Return) bool {
		if ret != nvml.SUCCESS && first == nvml.SUCCESS {
			first = ret
		}
		got = got || ret == nvml.SUCCESS
		return ret == nvml.SUCCESS
	}
	if mem, ret := d.GetMemoryInfo(); note(ret) {
		r.MemUsedBytes = results.I64(int64(mem.Used))
	}
	if u, ret := d.GetUtilizationRates(); note(ret) {
		r.UtilGPUPct = results.F64(float64(u.Gpu))
	}
	if mw, ret := d.GetPowerUsage(); note(ret) {
		r.PowerW = results.F64(float64(mw) / 1000)
	}
	// NVML gives PCIe throughput in KB/s over a 20 ms window; KB is 1024 bytes in
	// NVML's units (as in its memory figures).
	if kb, ret := d.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); note(ret) {
		r.PCIeTxBytesPerS = results.F64(float64(kb) * 1024)
	}
	if kb, ret := d.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); note(ret) {
		r.PCIeRxBytesPerS = results.F64(float64(kb) * 1024)
	}
	if m.nvlink[device] {
		r.NVLinkTxBytesPerS, r.NVLinkRxBytesPerS = m.nvlinkRates(device, d)
		got = got || r.NVLinkTxBytesPerS != nil
	}
	// What else the device was doing (issue 29): its SM clock, why the driver held
	// the clocks down, and the processes on it that are not fsdpbench's.
	if mhz, ret := d.GetClockInfo(nvml.CLOCK_SM); note(ret) {
		r.SMClockMHz = results.F64(float64(mhz))
	}
	// The throttle-reason call, not its newer "clock event" name: every driver
	// has it, and the bits are the same.
	if bits, ret := d.GetCurrentClocksThrottleReasons(); note(ret) {
		r.Throttle, r.ThrottleKnown = throttleNames(bits), true
	}
	if ps, ret := d.GetComputeRunningProcesses(); note(ret) {
		pids := make([]uint32, len(ps))
		for i, p := range ps {
			pids[i] = p.Pid
		}
		if own, ok := ownPIDs(pids, os.Getpid()); ok {
			n := 0
			for _, o := range own {
				if !o {
					n++
				}
			}
			r.OtherProcesses = &n
		}
	}
	if !got {
		return r, fmt.Errorf("NVML answered nothing for device %d (%v)", device, first)
	}
	return r, nil
}

// throttleBits maps the clock throttle reasons that slow a run to
// results.GPUThrottleReasons' names; idle, application clocks, sync boost and the
// display clock do not slow a run.
var throttleBits = []struct {
	bit  uint64
	name string
}{
	{nvml.ClocksThrottleReasonSwPowerCap, "sw_power_cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{nvml.ClocksThrottleReasonSwThermalSlowdown, "sw_thermal"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake"},
}

func throttleNames(bits uint64) []string {
	var out []string
	for _, b := range throttleBits {
		if bits&b.bit != 0 {
			out = append(out, b.name)
		}
	}
	return out
}

// nvlinkRates reads the device's cumulative NVLink data counters (all links) and
// turns the change since the previous reading into bytes/s; the first reading
// has no rate.
func (m *NVML) nvlinkRates(device int, d nvml.Device) (tx, rx *float64) {
	const allLinks = math.MaxUint32 // NVML's scope for "summed over every link"
	v := []nvml.FieldValue{
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: allLinks},
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: allLinks},
	}
	cur := nvlinkCount{}
	if d.GetFieldValues(v) == nvml.SUCCESS {
		t, okT := fieldUint(v[0])
		r, okR := fieldUint(v[1])
		cur = nvlinkCount{ok: okT && okR, tx: t, rx: r, atUs: v[0].Timestamp}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.prev[device]
	m.prev[device] = cur
	return rate(prev, cur)
}

func rate(prev, cur nvlinkCount) (tx, rx *float64) {
	if !prev.ok || !cur.ok || cur.atUs <= prev.atUs || cur.tx < prev.tx || cur.rx < prev.rx {
		return nil, nil // no earlier reading, or the counters were reset
	}
	dt := float64(cur.atUs-prev.atUs) / 1e6
	return results.F64(float64(cur.tx-prev.tx) * 1024 / dt), results.F64(float64(cur.rx-prev.rx) * 1024 / dt)
}

// fieldUint decodes an integer field value (NVML stores it in 8 little-endian
// bytes, as wide as its ValueType says).
func fieldUint(v nvml.FieldValue) (uint64, bool) {
	if nvml.Return(v.NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(binary.LittleEndian.Uint32(v.Value[:4])), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return binary.LittleEndian.Uint64(v.Value[:]), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		n := int64(binary.LittleEndian.Uint64(v.Value[:]))
		return uint64(n), n >= 0
	case nvml.VALUE_TYPE_SIGNED_INT:
		n := int32(binary.LittleEndian.Uint32(v.Value[:4]))
		return uint64(n), n >= 0
	}
	return 0, false
}

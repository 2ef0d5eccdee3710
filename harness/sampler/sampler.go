// Package sampler reads the GPUs a run uses while it runs — memory in use,
// utilization, power, PCIe and NVLink throughput — whatever the backend, so that
// every run gets samples.csv and an NVML peak_device_mem_bytes (DESIGN.md). Readings
// come from a Source: NVML when the driver is there (OpenNVML), a fake in tests. A
// reading the driver does not give stays nil: unknown, never 0.
package sampler

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultInterval is how often a Sampler reads its devices when no interval is given.
const DefaultInterval = 500 * time.Millisecond

// Reading is what one device reported at one moment. Nil fields are unknown.
type Reading struct {
	MemUsedBytes      *int64
	UtilGPUPct        *float64
	PowerW            *float64
	PCIeTxBytesPerS   *float64
	PCIeRxBytesPerS   *float64
	NVLinkTxBytesPerS *float64
	NVLinkRxBytesPerS *float64
	// SMClockMHz is the SM clock; Throttle the reasons the driver held the clocks
	// down that slow a run (results.GPUThrottleReasons' names), nil when none or
	// unknown, with ThrottleKnown saying which.
	SMClockMHz    *float64
	Throttle      []string
	ThrottleKnown bool
	// OtherProcesses counts the processes on the device that are not fsdpbench's
	// (nor its descendants'); nil when that cannot be told (another PID namespace).
	OtherProcesses *int
}

// DeviceInfo describes a device and its driver; empty strings are unknown.
type DeviceInfo struct {
	Name string
	// Driver is the kernel driver's version ("550.54.15").
	Driver string
	// CUDA is the CUDA version the driver supports ("12.4").
	CUDA string
}

// Source reads devices. Devices are numbered 0..Devices()-1 in the order CUDA shows
// them to the runs (CUDA_VISIBLE_DEVICES), which is how the harness hands them out.
// Implementations must be safe for concurrent use: runs executing at once sample
// through one Source.
type Source interface {
	// Devices is how many devices the source can read.
	Devices() int
	// Sample reads device now. An error means the device gave nothing at all;
	// figures it does not report are nil in the Reading instead.
	Sample(ctx context.Context, device int) (Reading, error)
	// Info describes device.
	Info(device int) DeviceInfo
}

// Sample is one Reading of one device, TimeS seconds after its Sampler started.
type Sample struct {
	TimeS float64
	// Repeat is the run's repeat the sample belongs to; the harness sets it.
	Repeat int
	Device int
	Reading
}

// Sampler reads a set of devices every interval until it is stopped. A nil
// *Sampler samples nothing and stops with an empty Report.
type Sampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	info   DeviceInfo

	mu      sync.Mutex
	samples []Sample
	failed  int
	err     error
}

// Start reads devices of src at once (that first reading is always taken) and then every interval (DefaultInterval
// when interval is 0) until ctx ends or Stop is called. It returns nil (a Sampler
// that samples nothing) when there is no source, no device or interval < 0.
// Devices the source does not have are left out.
func Start(ctx context.Context, src Source, devices []int, interval time.Duration) *Sampler {
	if src == nil || interval < 0 {
		return nil
	}
	if interval == 0 {
		interval = DefaultInterval
	}
	var devs []int
	for _, d := range devices {
		if d >= 0 && d < src.Devices() {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Sampler{cancel: cancel, done: make(chan struct{}), info: src.Info(devs[0])}
	go s.loop(ctx, src, devs, interval)
	return s
}

func (s *Sampler) loop(ctx context.Context, src Source, devices []int, interval time.Duration) {
	defer close(s.done)
	start := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	// The first round is always taken, even when the sampler is stopped at once:
	// a run shorter than the interval still gets one reading of each device.
	for first := true; ; first = false {
		for _, d := range devices {
			if !first && ctx.Err() != nil {
				return
			}
			r, err := src.Sample(ctx, d)
			at := time.Since(start).Seconds()
			s.mu.Lock()
			if err != nil {
				// A device that stops answering must not end the run's record: keep
				// sampling the others and report how many readings were lost.
				s.failed++
				if s.err == nil {
					s.err = fmt.Errorf("sample device %d: %w", d, err)
				}
			} else {
				s.samples = append(s.samples, Sample{TimeS: at, Device: d, Reading: r})
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop ends the sampling, waits for the sampling goroutine to return and reports
// what it read. It may be called more than once.
func (s *Sampler) Stop() Report {
	if s == nil {
		return Report{}
	}
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{Samples: append([]Sample(nil), s.samples...), Info: s.info, Failed: s.failed, Err: s.err}
	for _, smp := range r.Samples {
		if smp.MemUsedBytes == nil {
			continue
		}
		if r.PeakMemBytes == nil {
			r.PeakMemBytes = map[int]int64{}
		}
		if p, ok := r.PeakMemBytes[smp.Device]; !ok || *smp.MemUsedBytes > p {
			r.PeakMemBytes[smp.Device] = *smp.MemUsedBytes
		}
	}
	return r
}

// Report is what a Sampler read.
type Report struct {
	// Samples are the readings in the order they were taken.
	Samples []Sample
	// PeakMemBytes holds, per device, the most memory seen in use on it; devices
	// whose memory was never read are absent.
	PeakMemBytes map[int]int64
	// Info describes the first device sampled and its driver.
	Info DeviceInfo
	// Failed counts the readings a device did not give; Err is the first of them.
	Failed int
	Err    error
}

// PeakDeviceMemBytes is the largest per-device peak (the figure metrics.json calls
// peak_device_mem_bytes), or nil when no device's memory was read.
func (r Report) PeakDeviceMemBytes() *int64 {
	var peak *int64
	for _, p := range r.PeakMemBytes {
		if peak == nil || p > *peak {
			peak = &p
		}
	}
	return peak
}

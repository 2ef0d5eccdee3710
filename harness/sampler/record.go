package sampler

import (
	"math"
	"slices"

	"github.com/fsdpbench/fsdpbench/results"
)

// Devices chooses what to sample for a run: the devices the harness assigned to
// it, or, when it assigned none (a backend that places its ranks itself, as
// torchrun does), every device of src unless the run is on the CPU.
func Devices(src Source, assigned []int, hardware string) []int {
	if src == nil {
		return nil
	}
	if len(assigned) > 0 {
		return assigned
	}
	if hardware == "cpu" {
		return nil
	}
	all := make([]int, src.Devices())
	for i := range all {
		all[i] = i
	}
	return all
}

// Apply records in res what r read while res's repeat ran, and stamps r's samples
// with repeat. It reports whether the samples belong to the run: they do not when
// res's figures are predicted or the backend ran on the CPU, since the GPUs'
// readings then say nothing about them (and must not pass for a measurement).
//
// The sampled peak becomes res.PeakDeviceMemBytes only when the backend reported
// none (neither for the run nor for a rank); the device name, driver and CUDA
// version fill res.Env where the backend left them empty.
func (r Report) Apply(res *results.Result, repeat int) bool {
	if len(r.Samples) == 0 || res.Predicted || res.Env.Hardware == "cpu" {
		return false
	}
	for i := range r.Samples {
		r.Samples[i].Repeat = repeat
	}
	if peak := r.PeakDeviceMemBytes(); peak != nil && !backendPeak(res) {
		res.PeakDeviceMemBytes = peak
	}
	if res.Env.GPU == "" {
		res.Env.GPU = r.Info.Name
	}
	if res.Env.Driver == "" {
		res.Env.Driver = r.Info.Driver
	}
	if res.Env.CUDA == "" {
		res.Env.CUDA = r.Info.CUDA
	}
	r.applyMachine(res)
	return true
}

// applyMachine records in res.Env.Machine what the GPU readings say of the
// device's state (issue 29): the median SM clock, the share of readings with the
// clocks held down and every reason seen, and the most processes seen at once that
// were not fsdpbench's.
func (r Report) applyMachine(res *results.Result) {
	var clocks []float64
	throttled, knownThrottle := 0, 0
	var reasons []string
	var other *int
	// Readings of one round (one moment) share a TimeS per device loop: count the
	// other processes per round, over all the run's devices.
	perRound := map[float64]int{}
	rounds := map[float64]bool{}
	for _, smp := range r.Samples {
		if smp.SMClockMHz != nil {
			clocks = append(clocks, *smp.SMClockMHz)
		}
		if smp.ThrottleKnown {
			knownThrottle++
			if len(smp.Throttle) > 0 {
				throttled++
			}
			for _, n := range smp.Throttle {
				if !slices.Contains(reasons, n) {
					reasons = append(reasons, n)
				}
			}
		}
		if smp.OtherProcesses != nil {
			round := math.Floor(smp.TimeS / 0.05) // devices of one round are read within milliseconds
			perRound[round] += *smp.OtherProcesses
			rounds[round] = true
		}
	}
	for round := range rounds {
		if n := perRound[round]; other == nil || n > *other {
			other = &n
		}
	}
	if len(clocks) == 0 && knownThrottle == 0 && other == nil {
		return
	}
	m := res.Env.Machine
	if m == nil {
		m = &results.Machine{Repeats: 1}
		res.Env.Machine = m
	}
	if len(clocks) > 0 {
		slices.Sort(clocks)
		mid := len(clocks) / 2
		med := clocks[mid]
		if len(clocks)%2 == 0 {
			med = (clocks[mid-1] + clocks[mid]) / 2
		}
		m.GPUSMClockMHz = results.F64(med)
	}
	if knownThrottle > 0 {
		m.GPUThrottledShare = results.F64(float64(throttled) / float64(knownThrottle))
		m.GPUThrottle = reasons
	}
	m.GPUOtherProcesses = other
}

// backendPeak reports whether the backend measured the device peak itself.
func backendPeak(res *results.Result) bool {
	if res.PeakDeviceMemBytes != nil {
		return true
	}
	for _, pr := range res.PerRank {
		if pr.PeakDeviceMemBytes != nil {
			return true
		}
	}
	return false
}

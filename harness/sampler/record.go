package sampler

import "github.com/fsdpbench/fsdpbench/results"

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
	return true
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

package sampler

import (
	"strconv"
	"strings"
)

// target is one CUDA-visible device as NVML finds it: an NVML index, or (index -1)
// a UUID to look up, for MIG instances, which NVML does not number.
type target struct {
	index int
	uuid  string
}

// cudaVisible maps CUDA_VISIBLE_DEVICES (value, set says whether it is set at all)
// to NVML devices, reading it as CUDA does: entries in order, up to the first that
// names no device. uuids are the UUIDs of NVML's devices 0..n-1.
//
// An integer entry is taken as an NVML index. CUDA numbers devices fastest first
// unless CUDA_DEVICE_ORDER=PCI_BUS_ID; on nodes of identical GPUs (the case this
// tool measures) both orders are NVML's PCI bus order. UUIDs, and unique prefixes
// of them, with or without "GPU-", are matched exactly.
func cudaVisible(value string, set bool, uuids []string) []target {
	if !set {
		out := make([]target, len(uuids))
		for i := range uuids {
			out[i] = target{index: i}
		}
		return out
	}
	var out []target
	for _, e := range strings.Split(value, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			break
		}
		if n, err := strconv.Atoi(e); err == nil {
			if n < 0 || n >= len(uuids) {
				break
			}
			out = append(out, target{index: n})
			continue
		}
		if strings.HasPrefix(e, "MIG-") {
			out = append(out, target{index: -1, uuid: e})
			continue
		}
		i, ok := uuidPrefix(uuids, strings.TrimPrefix(e, "GPU-"))
		if !ok {
			break
		}
		out = append(out, target{index: i})
	}
	return out
}

// uuidPrefix finds the one device whose UUID starts with prefix ("GPU-" left out).
func uuidPrefix(uuids []string, prefix string) (int, bool) {
	found := -1
	for i, u := range uuids {
		if strings.HasPrefix(strings.TrimPrefix(u, "GPU-"), prefix) {
			if found >= 0 {
				return 0, false // ambiguous: CUDA refuses it too
			}
			found = i
		}
	}
	return found, found >= 0
}

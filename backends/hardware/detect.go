package hardware

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// detectTimeout bounds nvidia-smi: a wedged driver must not hang a sweep.
const detectTimeout = 10 * time.Second

// detected caches Detect: the hardware does not change while the process runs, and
// the sim predicts thousands of `hardware: auto` runs in one plan.
var detected = sync.OnceValues(func() (Profile, string) {
	ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi",
		"--query-gpu=name,memory.total", "--format=csv,noheader").Output()
	return fromNvidiaSMI(string(out), err)
})

// Detect picks the profile of this machine for `hardware: auto` and says why:
// the first GPU nvidia-smi lists, mapped to a profile by its name (with the memory
// nvidia-smi reports, which a MIG slice makes smaller), or cpu when there is no
// working nvidia-smi or the GPU has no profile. The result is computed once per
// process.
func Detect() (Profile, string) {
	p, why := detected()
	return clone(p), why
}

// gpuNames maps substrings of nvidia-smi's GPU name to profiles, most specific
// first ("H100 PCIe" before "H100").
var gpuNames = []struct{ match, profile string }{
	{"H100 PCIe", "h100-pcie"},
	{"H100 NVL", "h100-pcie"}, // a PCIe card (with 94 GB); NVLink bridges pair only two
	{"H100", "h100-sxm"},
	{"H200", "h200"},
	{"A100", "a100-80g"},
}

// fromNvidiaSMI maps the output of `nvidia-smi --query-gpu=name,memory.total
// --format=csv,noheader` (or the error running it) to a profile and the reason.
func fromNvidiaSMI(out string, runErr error) (Profile, string) {
	cpu := cpuProfile()
	if runErr != nil {
		return cpu, fmt.Sprintf("no usable nvidia-smi (%v): using the cpu profile", runErr)
	}
	var lines []string
	for l := range strings.Lines(out) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return cpu, "nvidia-smi lists no GPU: using the cpu profile"
	}
	name, memText, _ := strings.Cut(lines[0], ",")
	name, memText = strings.TrimSpace(name), strings.TrimSpace(memText)
	count := fmt.Sprintf("%d × %s", len(lines), name)
	for _, g := range gpuNames {
		if !strings.Contains(name, g.match) {
			continue
		}
		p, err := Lookup(g.profile)
		if err != nil {
			break // the table names a profile that exists; a test checks it
		}
		why := fmt.Sprintf("nvidia-smi: %s → profile %s", count, p.Name)
		if mem, ok := parseMiB(memText); ok && mem != p.MemBytes {
			why += fmt.Sprintf(" with its reported %s of memory (the profile says %d MiB)", memText, p.MemBytes>>20)
			p.MemBytes = mem
		}
		return p, why
	}
	return cpu, fmt.Sprintf("nvidia-smi: %s has no profile (profiles: %s): using the cpu profile; set hardware to the nearest profile to predict for the GPU",
		count, strings.Join(Names(), ", "))
}

// maxDeviceMiB bounds a GPU's memory as nvidia-smi reports it (16 TiB, far
// beyond any GPU): a larger figure is not a GPU's, and in bytes it would
// overflow.
const maxDeviceMiB = 16 << 20

// parseMiB reads nvidia-smi's "81559 MiB"; a figure out of (0, maxDeviceMiB]
// is not read (the profile's stands).
func parseMiB(s string) (int64, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "MiB")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || v <= 0 || v > maxDeviceMiB {
		return 0, false
	}
	return v << 20, true
}

package kernels_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels/fakecuda"
)

// smLimits are an SM's resources per architecture, from NVIDIA's occupancy tables
// (CUDA C++ Programming Guide, "Compute Capabilities"): registers, shared memory
// (the configurable maximum), resident blocks and warps. The 1 KiB a block has
// reserved by the system is counted by cuobjdump as static shared memory on sm_90
// and added here on sm_80.
var smLimits = map[string]struct{ regs, shared, blocks, warps, reserved int }{
	"sm_80": {65536, 164 * 1024, 32, 64, 1024},
	"sm_90": {65536, 228 * 1024, 32, 64, 0},
}

var sassFuncRe = regexp.MustCompile(`(?m)^\s*Function : (\w+)\s*$`)

// sassByArch splits cuobjdump -sass output into arch → kernel → its SASS.
func sassByArch(text string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, sec := range strings.Split(text, "Fatbin elf code:")[1:] {
		m := archRe.FindStringSubmatch(sec)
		if m == nil {
			continue
		}
		arch := m[1]
		if out[arch] == nil {
			out[arch] = map[string]string{}
		}
		locs := sassFuncRe.FindAllStringSubmatchIndex(sec, -1)
		for i, l := range locs {
			end := len(sec)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			out[arch][sec[l[2]:l[3]]] = sec[l[1]:end]
		}
	}
	return out
}

// TestTensorCoreKernelsStatic is the evidence for the tensor-core attention kernels
// that needs no GPU: in the sm_80 and sm_90 cubins each of them runs its products
// on tensor cores (HMMA.16816.F32.BF16), takes its operands through ldmatrix
// (LDSM) and its tiles through cp.async (LDGSTS); it uses no local memory or stack
// (no spills); its registers × block and shared memory let kernels.AttnTCMinBlocks
// blocks share an SM. It prints each kernel's theoretical occupancy.
func TestTensorCoreKernelsStatic(t *testing.T) {
	fakecuda.NeedToolkit(t)
	sass := sassByArch(cuobjdump(t, "-sass"))
	res := cuobjdump(t, "-res-usage")
	usages := map[string]map[string]usage{}
	arch := ""
	for _, sec := range strings.Split(res, "Fatbin elf code:") {
		if m := archRe.FindStringSubmatch(sec); m != nil {
			arch = m[1]
		}
		for _, m := range funcRe.FindAllStringSubmatch(sec, -1) {
			n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
			if usages[arch] == nil {
				usages[arch] = map[string]usage{}
			}
			usages[arch][m[1]] = usage{n(2), n(3), n(4), n(5)}
		}
	}
	require.NotEmpty(t, kernels.TensorCore)
	for _, arch := range []string{"sm_80", "sm_90"} {
		lim := smLimits[arch]
		for _, k := range kernels.TensorCore {
			code, ok := sass[arch][k.Name]
			require.True(t, ok, "%s: no SASS for %s", arch, k.Name)
			for _, op := range []string{"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "LDGSTS.E"} {
				require.Contains(t, code, op, "%s %s: no %s in the SASS", arch, k.Name, op)
			}
			hmma := strings.Count(code, "HMMA.16816.F32.BF16")
			u, ok := usages[arch][k.Name]
			require.True(t, ok, "%s: no resource usage for %s", arch, k.Name)
			require.Zero(t, u.local, "%s %s: local memory (spills)", arch, k.Name)
			require.Zero(t, u.stack, "%s %s: stack", arch, k.Name)
			require.NotContains(t, code, "STL", "%s %s: local stores in the SASS", arch, k.Name)

			// Blocks a SM: registers are allocated per warp in units of 256 (8 a
			// thread), shared memory per block with the reserved 1 KiB.
			warps := k.Block / 32
			regsPerWarp := (u.reg*32 + 255) / 256 * 256
			byRegs := lim.regs / (regsPerWarp * warps)
			smem := u.shared + k.Shared(kernels.MaxHeadDim) + lim.reserved
			bySmem := lim.shared / smem
			blocks := min(byRegs, bySmem, lim.blocks, lim.warps/warps)
			t.Logf("%s %s: %d HMMA, %d registers, %d B shared a block → %d blocks/SM (registers %d, shared %d): occupancy %d/%d warps = %.1f%%",
				arch, k.Name, hmma, u.reg, smem, blocks, byRegs, bySmem, blocks*warps, lim.warps,
				100*float64(blocks*warps)/float64(lim.warps))
			require.GreaterOrEqual(t, blocks, kernels.AttnTCMinBlocks, "%s %s: blocks per SM", arch, k.Name)
		}
	}
}

//go:build cgo

package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// launched runs every op once on d with fp32 buffers and once with bf16 tensors
// (fp32 statistics), plus the casts, a bf16 zero and the fp32 += bf16 add, with a
// hook that records each launch, and returns the argument kinds per kernel.
func launched(t *testing.T, d *Device) map[string][][]kernels.Kind {
	t.Helper()
	got := map[string][][]kernels.Kind{}
	d.launchHook = func(k *kernels.Kernel, args []arg) {
		kinds := make([]kernels.Kind, len(args))
		for i, a := range args {
			kinds[i] = a.kind
		}
		got[k.Name] = append(got[k.Name], kinds)
	}
	st := func(n int) device.Buffer { return alloc(t, d, n) } // statistics: fp32 always
	h := func(n int) device.Buffer {
		x, err := d.AllocDType(n, device.BF16, device.Other)
		require.NoError(t, err)
		return x
	}
	for _, b := range []func(int) device.Buffer{st, h} {
		allOps(d, b, st)
	}
	for _, hd := range []int{64, 128} { // the tensor-core kernels' head dims
		as := device.AttnShape{Batch: 1, Seq: 3, Heads: 2, KVHeads: 1, HeadDim: hd}
		d.AttentionForward(h(as.QLen()), st(as.LSELen()), h(as.QLen()), h(as.KVLen()), h(as.KVLen()), as)
		d.AttentionBackward(h(as.QLen()), h(as.KVLen()), h(as.KVLen()), h(as.QLen()), h(as.QLen()), h(as.KVLen()),
			h(as.KVLen()), h(as.QLen()), st(as.LSELen()), as)
	}
	d.Cast(h(4), st(4))
	d.Cast(st(4), h(4))
	d.Zero(h(3))
	d.Add(st(4), h(4), 1)
	d.AdamW(st(4), st(4), st(4), st(4), device.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1})
	return got
}

// allOps runs every op but AdamW once, its tensors from b, its statistics from st.
func allOps(d *Device, b, st func(int) device.Buffer) {
	rs := device.RoPEShape{Batch: 1, Seq: 3, Heads: 2, HeadDim: 4, Theta: 10}
	as := device.AttnShape{Batch: 1, Seq: 3, Heads: 2, KVHeads: 1, HeadDim: 4}
	d.Add(b(4), b(4), 1)
	d.Scale(b(4), 2)
	d.Sum(b(4))
	d.SumSquares(b(4))
	d.EmbeddingForward(b(6), b(9), []int32{0, 2}, 3)
	d.EmbeddingBackward(b(9), b(6), []int32{0, 2}, 3)
	d.RMSNormForward(b(6), st(2), b(6), b(3), 2, 3, 1e-5)
	d.RMSNormBackward(b(6), b(3), b(6), b(6), b(3), st(2), 2, 3)
	d.RoPEForward(b(rs.Len()), rs)
	d.RoPEBackward(b(rs.Len()), rs)
	d.AttentionForward(b(as.QLen()), st(as.LSELen()), b(as.QLen()), b(as.KVLen()), b(as.KVLen()), as)
	d.AttentionBackward(b(as.QLen()), b(as.KVLen()), b(as.KVLen()), b(as.QLen()), b(as.QLen()), b(as.KVLen()),
		b(as.KVLen()), b(as.QLen()), st(as.LSELen()), as)
	d.SwiGLUForward(b(5), b(5), b(5))
	d.SwiGLUBackward(b(5), b(5), b(5), b(5), b(5))
	d.CrossEntropyForward(st(2), b(6), []int32{0, 2}, 3)
	d.CrossEntropyBackward(b(6), b(6), []int32{0, 2}, 3, 0.5)
	d.CrossEntropyFused(st(2), b(6), b(6), []int32{0, 2}, 3, 0.5)
	ks := rs
	ks.Heads = 1
	d.RoPEQK(b(rs.Len()), b(ks.Len()), rs, ks, false)
	d.ResidualRMSNorm(b(6), st(2), b(6), b(6), b(3), 2, 3, 1e-5)
	d.SwiGLUPackedForward(b(6), b(12), 2, 3)
	d.SwiGLUPackedBackward(b(12), b(6), b(12), 2, 3)
}

// ptxParams parses each .entry's parameter types from PTX text.
func ptxParams(ptx string) map[string][]string {
	out := map[string][]string{}
	entry := regexp.MustCompile(`\.entry\s+(\w+)\s*\(([^)]*)\)`)
	param := regexp.MustCompile(`\.param\s+\.(\w+)`)
	for _, m := range entry.FindAllStringSubmatch(ptx, -1) {
		var types []string
		for _, p := range param.FindAllStringSubmatch(m[2], -1) {
			types = append(types, p[1])
		}
		out[m[1]] = types
	}
	return out
}

// ptxType is the PTX parameter type a kind must have.
var ptxType = map[kernels.Kind][]string{
	kernels.Ptr: {"u64"}, kernels.I64: {"u64", "s64"}, kernels.I32: {"u32", "s32"}, kernels.F32: {"f32"},
}

// TestLaunchWrappersMatchKernelsAndPTX checks every launch wrapper, op by op,
// against the kernels' ABI table (launch panics on a mismatch, so reaching the end
// means every wrapper agrees with it), that every kernel of the table is launched
// by some op, and each wrapper's argument kinds against the parameter list that
// the PTX in the embedded fatbin declares (cuobjdump -ptx).
func TestLaunchWrappersMatchKernelsAndPTX(t *testing.T) {
	requireFakes(t)
	got := launched(t, newTestDevice(t, Options{}))
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	cast := map[string]bool{kernels.SumFinish.Name: true, kernels.Zero.Name: true, kernels.Copy.Name: true}
	for _, k := range kernels.All {
		if cast[k.Name] {
			continue // no Device op uses them: sums finish on the host, memset and memcpy serve fp32 Zero and Copy
		}
		assert.Contains(t, names, k.Name, "no op launches %s", k.Name)
	}

	f := filepath.Join(t.TempDir(), "kernels.fatbin")
	require.NoError(t, os.WriteFile(f, kernels.Fatbin, 0o644))
	out, err := exec.Command("cuobjdump", "-ptx", f).CombinedOutput()
	require.NoError(t, err, "cuobjdump -ptx (install the CUDA toolkit): %s", out)
	ptx := ptxParams(string(out))
	for name, calls := range got {
		types, ok := ptx[name]
		if !assert.True(t, ok, "%s is not in the fatbin's PTX", name) {
			continue
		}
		for _, kinds := range calls {
			if !assert.Len(t, kinds, len(types), "%s: the wrapper passes %d arguments, the PTX declares %d", name, len(kinds), len(types)) {
				continue
			}
			for i, k := range kinds {
				assert.Contains(t, ptxType[k], types[i], "%s parameter %d: the wrapper passes %v, the PTX declares .%s", name, i, k, types[i])
			}
		}
	}
	assert.NotEmpty(t, strings.TrimSpace(string(out)))
}

//go:build cgo

package cuda

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// newTestDevice opens GPU 0 (the fake unless the real libraries were asked for)
// and closes it when the test ends.
func newTestDevice(t *testing.T, o Options) *Device {
	t.Helper()
	if o.WorkspaceBytes == 0 {
		o.WorkspaceBytes = 1 << 20
	}
	d, err := New(o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func requireFakes(t *testing.T) {
	t.Helper()
	if fakes.cuda == "" {
		t.Skip("checks the fakes' records; runs with the fake libraries (" + EnvTestLibraries + " unset)")
	}
}

func TestInfoFromTheLibraries(t *testing.T) {
	requireFakes(t)
	d := newTestDevice(t, Options{})
	info := d.Info()
	assert.Equal(t, "fakecuda CPU runner", info.GPU)
	assert.Equal(t, "8.0", info.ComputeCapability, "the fake is an A100")
	assert.Positive(t, info.MemoryBytes)
	assert.Regexp(t, `^1[1-9]\.\d$`, info.CUDA, "the toolkit's CUDA_VERSION the fake reports")
	assert.Equal(t, "99.1.0", info.CUBLAS, "the fake cuBLAS's version")
	assert.Equal(t, []string{fakes.cuda, fakes.cublas}, []string{info.LibCUDA, info.LibCUBLAS})
	assert.Equal(t, "cuda:0", d.Name())
}

// gemmLog is what the fake cuBLAS logged, one map per call.
func gemmLog(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := map[string]string{}
		for _, kv := range strings.Fields(sc.Text()) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestMatMulColumnMajorMapping runs MatMul with every transpose combination on
// non-square shapes and checks both the result (against a row-major triple loop)
// and the exact column-major call the fake cuBLAS received: operands swapped, m
// and n swapped, each leading dimension the length of a stored row.
func TestMatMulColumnMajorMapping(t *testing.T) {
	requireFakes(t)
	log := filepath.Join(t.TempDir(), "gemm.log")
	t.Setenv("FSDPBENCH_FAKECUBLAS_LOG", log)
	d := newTestDevice(t, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	m, n, k := 3, 5, 7
	for _, tc := range []struct {
		transA, transB bool
		alpha, beta    float32
		lda, ldb       int // the column-major call's, for the swapped operands
	}{
		{false, false, 1, 0, n, k}, {true, false, 1, 0, n, m}, {false, true, 1, 0, k, k},
		{true, true, 0.5, 1, k, m}, {false, true, -2, 0.25, k, k},
	} {
		before := len(gemmLog(t, log))
		a, b, c := randf(rng, m*k), randf(rng, k*n), randf(rng, m*n)
		want := make([]float32, m*n)
		for i := range m {
			for j := range n {
				s := 0.0
				for l := range k {
					av, bv := a[i*k+l], b[l*n+j]
					if tc.transA {
						av = a[l*m+i]
					}
					if tc.transB {
						bv = b[j*k+l]
					}
					s += float64(av) * float64(bv)
				}
				want[i*n+j] = float32(float64(tc.alpha)*s + float64(tc.beta)*float64(c[i*n+j]))
			}
		}
		ab, bb, cb := upload(t, d, a), upload(t, d, b), upload(t, d, c)
		d.MatMul(cb, ab, bb, tc.transA, tc.transB, m, n, k, tc.alpha, tc.beta)
		got := download(t, d, cb)
		require.NoError(t, d.Sync())
		assert.InDeltaSlice(t, want, got, 1e-5)

		calls := gemmLog(t, log)[before:]
		require.Len(t, calls, 1)
		g := calls[0]
		flag := func(b bool) string {
			if b {
				return "T"
			}
			return "N"
		}
		assert.Equal(t, "cublasSgemm_v2", g["call"])
		assert.Equal(t, flag(tc.transB), g["transa"], "op(B) comes first")
		assert.Equal(t, flag(tc.transA), g["transb"])
		assert.Equal(t, []string{strconv.Itoa(n), strconv.Itoa(m), strconv.Itoa(k)}, []string{g["m"], g["n"], g["k"]})
		assert.Equal(t, strconv.Itoa(tc.lda), g["lda"])
		assert.Equal(t, strconv.Itoa(tc.ldb), g["ldb"])
		assert.Equal(t, strconv.Itoa(n), g["ldc"])
		assert.Equal(t, ptrText(Pointer(bb)), g["A"])
		assert.Equal(t, ptrText(Pointer(ab)), g["B"])
		assert.Equal(t, ptrText(Pointer(cb)), g["C"])
		assert.Equal(t, ptrText(d.ComputeStream()), g["stream"], "cuBLAS runs on the compute stream")
	}
}

func ptrText(p uintptr) string { return "0x" + strconv.FormatUint(uint64(p), 16) }

func TestMatMulBF16Mode(t *testing.T) {
	requireFakes(t)
	log := filepath.Join(t.TempDir(), "gemm.log")
	t.Setenv("FSDPBENCH_FAKECUBLAS_LOG", log)
	d := newTestDevice(t, Options{GEMM: GEMMBF16})
	// 1 + 2⁻¹⁰ is exact in fp32 and rounds to 1 in bf16 (8 bits of mantissa).
	x := float32(1 + 1.0/1024)
	a, b := upload(t, d, []float32{x}), upload(t, d, []float32{x})
	c := alloc(t, d, 1)
	d.MatMul(c, a, b, false, false, 1, 1, 1, 1, 0)
	assert.Equal(t, []float32{1}, download(t, d, c), "inputs rounded to bf16, product accumulated in fp32")
	calls := gemmLog(t, log)
	require.Len(t, calls, 1)
	assert.Equal(t, "cublasGemmEx", calls[0]["call"])
	assert.Equal(t, "75", calls[0]["compute"], "CUBLAS_COMPUTE_32F_FAST_16BF")
}

// TestMatMulOnBF16Buffers: a MatMul of bf16 buffers is one cublasGemmEx with
// CUDA_R_16BF A, B and C and CUBLAS_COMPUTE_32F, operands swapped as for fp32, on
// the compute stream; the product accumulates in fp32 and C is rounded once.
func TestMatMulOnBF16Buffers(t *testing.T) {
	requireFakes(t)
	log := filepath.Join(t.TempDir(), "gemm.log")
	t.Setenv("FSDPBENCH_FAKECUBLAS_LOG", log)
	d := newTestDevice(t, Options{})
	h := func(v []float32) device.Buffer {
		b, err := d.AllocDType(len(v), device.BF16, device.Other)
		require.NoError(t, err)
		d.CopyFromHost(b, v)
		return b
	}
	// Σ of 1 and eight times 2⁻⁹: each term alone rounds away in a bf16 sum
	// (8 bits of mantissa), fp32 accumulation keeps them: 1 + 2⁻⁶ is a bf16 value.
	k := 9
	a, b := make([]float32, k), make([]float32, k)
	for i := range k {
		a[i], b[i] = 1, 1.0/512
	}
	b[0] = 1
	ab, bb, cb := h(a), h(b), h([]float32{0})
	d.MatMul(cb, ab, bb, false, false, 1, 1, k, 1, 0)
	assert.Equal(t, []float32{1 + 1.0/64}, download(t, d, cb), "fp32 accumulation of bf16 operands")
	calls := gemmLog(t, log)
	require.Len(t, calls, 1)
	g := calls[0]
	assert.Equal(t, "cublasGemmEx", g["call"])
	assert.Equal(t, "14", g["dtype"], "CUDA_R_16BF")
	assert.Equal(t, "68", g["compute"], "CUBLAS_COMPUTE_32F")
	assert.Equal(t, ptrText(Pointer(bb)), g["A"], "op(B) comes first")
	assert.Equal(t, ptrText(Pointer(ab)), g["B"])
	assert.Equal(t, ptrText(d.ComputeStream()), g["stream"])
	assert.Panics(t, func() { d.MatMul(cb, ab, upload(t, d, b), false, false, 1, 1, k, 1, 0) }, "mixed dtypes")
	require.NoError(t, d.Sync())
}

func TestMatMulEmptyShapes(t *testing.T) {
	requireFakes(t)
	log := filepath.Join(t.TempDir(), "gemm.log")
	t.Setenv("FSDPBENCH_FAKECUBLAS_LOG", log)
	d := newTestDevice(t, Options{})
	c := upload(t, d, []float32{1, 2, 3, 4})
	d.MatMul(c, alloc(t, d, 0), alloc(t, d, 0), false, true, 2, 2, 0, 1, 0.5)
	assert.Equal(t, []float32{0.5, 1, 1.5, 2}, download(t, d, c), "k = 0 scales C by beta")
	d.MatMul(alloc(t, d, 0), alloc(t, d, 0), alloc(t, d, 6), false, false, 0, 2, 3, 1, 0)
	calls := gemmLog(t, log)
	require.Len(t, calls, 1, "m = 0 issues nothing")
	assert.Equal(t, "1", calls[0]["lda"], "leading dimensions stay ≥ 1 when k = 0")
	require.NoError(t, d.Sync())
}

// TestFailuresAreSticky injects a cuBLAS failure: the op returns, later ops are
// skipped, and Sync reports the first failure, again at every call.
func TestFailuresAreSticky(t *testing.T) {
	requireFakes(t)
	t.Setenv("FSDPBENCH_FAKECUBLAS_FAIL_AT", "2")
	d, err := New(Options{WorkspaceBytes: 1 << 20})
	require.NoError(t, err)
	a := upload(t, d, []float32{2})
	c := alloc(t, d, 1)
	d.MatMul(c, a, a, false, false, 1, 1, 1, 1, 0)
	require.NoError(t, d.Sync())
	d.MatMul(c, a, a, false, false, 1, 1, 1, 1, 0) // fails
	d.CopyFromHost(c, []float32{7})                // skipped
	err = d.Sync()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cuda:0: MatMul: cuBLAS: CUBLAS_STATUS_EXECUTION_FAILED (13)")
	assert.Equal(t, err.Error(), d.Sync().Error(), "the failure stays")
	assert.Equal(t, err.Error(), d.Close().Error(), "Close reports it too")
}

func TestOutOfDriverMemory(t *testing.T) {
	requireFakes(t)
	t.Setenv("FAKECUDA_MEM_LIMIT", strconv.Itoa(24<<20))
	d := newTestDevice(t, Options{})
	a, err := d.Alloc(4<<20, device.Params) // 16 MiB: a segment of its own
	require.NoError(t, err)
	_, err = d.Alloc(4<<20, device.Grads)
	require.ErrorIs(t, err, device.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "cuda:0: allocate 16777216 bytes of grads")
	assert.Equal(t, int64(16<<20), d.Memory().Total, "a failed allocation charges nothing")
	d.Free(a)
	b, err := d.Alloc(4<<20, device.Grads)
	require.NoError(t, err, "the freed block is reused")
	d.Free(b)
	require.NoError(t, d.Sync())
}

func TestCloseFreesEverything(t *testing.T) {
	requireFakes(t)
	// A second device on the same GPU sees the driver's memory through cuMemGetInfo.
	witness := newTestDevice(t, Options{})
	live := func() int64 { return witness.Extras().DeviceUsed }
	before := live()
	d, err := New(Options{WorkspaceBytes: 1 << 20})
	require.NoError(t, err)
	_, err = d.Alloc(1000, device.Params)
	require.NoError(t, err)
	b, err := d.Alloc(3<<20, device.Activations)
	require.NoError(t, err)
	d.Free(b)
	assert.Greater(t, live(), before)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "a second Close does nothing")
	assert.Equal(t, before, live(), "every segment back to the driver")
}

// kernelsSumScratch is the reduction scratch Sum takes: SumMaxPartials floats.
const kernelsSumScratch = kernels.SumMaxPartials * elemBytes

func randf(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func alloc(t *testing.T, d device.Device, n int) device.Buffer {
	t.Helper()
	b, err := d.Alloc(n, device.Other)
	require.NoError(t, err)
	return b
}

func upload(t *testing.T, d device.Device, v []float32) device.Buffer {
	t.Helper()
	b := alloc(t, d, len(v))
	d.CopyFromHost(b, v)
	return b
}

func download(t *testing.T, d device.Device, b device.Buffer) []float32 {
	t.Helper()
	out := make([]float32, b.Len())
	d.CopyToHost(out, b)
	return out
}

// TestCollectiveStreamAndStaging is the side NCCL uses: device pointers of
// buffers and views, the comm stream's handle and completion, and host slices
// staged through device memory.
func TestCollectiveStreamAndStaging(t *testing.T) {
	requireFakes(t)
	d := newTestDevice(t, Options{})
	b := upload(t, d, []float32{1, 2, 3, 4})
	assert.Equal(t, Pointer(b)+8, b.Slice(2, 2).(interface{ DevicePointer() uintptr }).DevicePointer())
	s := d.CollectiveStream()
	assert.Equal(t, d.CommStream(), s.Handle())
	assert.NotEqual(t, d.ComputeStream(), d.CommStream())
	// Under FAKECUDA_STREAMS=async the comm stream finishes its wait for the
	// upload a little later.
	require.Eventually(t, func() bool {
		done, err := s.Done()
		require.NoError(t, err)
		return done
	}, 10*time.Second, time.Millisecond)
	p, err := d.Scratch(3)
	require.NoError(t, err)
	require.NoError(t, d.ToDevice(p, []float32{5, 6, 7}))
	out := make([]float32, 3)
	require.NoError(t, d.ToHost(out, p))
	assert.Equal(t, []float32{5, 6, 7}, out)
	require.NoError(t, d.MakeCurrent())
	e := d.Record(device.CommStream)
	d.Wait(device.ComputeStream, e)
	require.NoError(t, d.WaitHost(e))
	d.Release(e)
	assert.Equal(t, int64(1<<20), d.Extras().Workspace)
	assert.Positive(t, d.ExtraMemory()["arena_reserved"])
}

// TestUseAfterClose: ops on a closed device fail through Sync instead of crashing,
// and buffers can still be freed (the tracker balances).
func TestUseAfterClose(t *testing.T) {
	requireFakes(t)
	d, err := New(Options{WorkspaceBytes: 1 << 20})
	require.NoError(t, err)
	b := upload(t, d, []float32{1, 2})
	require.NoError(t, d.Close())
	d.Scale(b, 2)
	d.Zero(b)
	d.Free(b)
	assert.Zero(t, d.Memory().Total)
	require.ErrorContains(t, d.Sync(), "after Close")
}

// TestExtrasReportedApart: what the arena holds beyond the tracked buffers (the
// cuBLAS workspace, rounding, scratch, free blocks) is reported next to the
// tracker's figures and never charged to them.
func TestExtrasReportedApart(t *testing.T) {
	requireFakes(t)
	d := newTestDevice(t, Options{})
	b, err := d.Alloc(1000, device.Params)
	require.NoError(t, err)
	assert.Equal(t, int64(4000), d.Memory().Total, "the tracker: 4 bytes per element, as on cpu")
	d.Sum(b) // takes the reduction's scratch
	e := d.Extras()
	assert.Equal(t, int64(1<<20), e.Workspace)
	assert.Equal(t, int64(kernelsSumScratch), e.Scratch)
	assert.Equal(t, int64(smallSegment), e.Arena.Reserved, "workspace, buffer and scratch share one 2 MiB segment")
	assert.Equal(t, e.Arena.Reserved-4000, e.Slack)
	assert.Equal(t, int64(1<<20+4096+kernelsSumScratch), e.Arena.InBlocks)
	assert.Positive(t, e.DeviceUsed)
	d.Free(b)
	assert.Equal(t, e.Arena.Reserved, d.Extras().Slack, "freed blocks stay in the arena as slack")
}

// TestConcurrentUse issues ops from several goroutines at once on buffers of their
// own, as a collective filling one unit while an op reads another does: every
// goroutine's results stay its own (the goroutines move between OS threads, each of
// which must have the context bound before its driver calls).
func TestConcurrentUse(t *testing.T) {
	requireFakes(t)
	d := newTestDevice(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			x := float32(g + 1)
			a, err := d.Alloc(4, device.Activations)
			if err != nil {
				errs <- err
				return
			}
			c, _ := d.Alloc(4, device.Activations)
			for range 50 {
				d.CopyFromHost(a, []float32{x, 0, 0, x})
				d.MatMul(c, a, a, false, false, 2, 2, 2, 1, 0) // x·I squared
				out := make([]float32, 4)
				d.CopyToHost(out, c)
				if out[0] != x*x || out[3] != x*x || out[1] != 0 {
					errs <- fmt.Errorf("goroutine %d read %v", g, out)
					return
				}
			}
			d.Free(a)
			d.Free(c)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, d.Sync())
	assert.Zero(t, d.Memory().Total)
}

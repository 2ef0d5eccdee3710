//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"math"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// gemmCall is one column-major cuBLAS GEMM: C = alpha·op(A)·op(B) + beta·C with
// C m×n (ldc), op(A) m×k (lda), op(B) k×n (ldb).
type gemmCall struct {
	transA, transB bool
	m, n, k        int
	a, b, c        uint64
	lda, ldb, ldc  int
}

// columnMajor maps the row-major product the Device interface describes onto
// cuBLAS's column-major one. A row-major matrix is its transpose in column-major
// order with the same leading dimension, so C (m×n) = op(A)·op(B) is computed as
// Cᵀ (n×m, ldc = n) = op(B)ᵀ·op(A)ᵀ: the operands swap, m and n swap, each keeps
// its own transpose flag, and a leading dimension is a stored row's length.
func columnMajor(c, a, b uint64, transA, transB bool, m, n, k int) gemmCall {
	g := gemmCall{transA: transB, transB: transA, m: n, n: m, k: k, a: b, b: a, c: c, ldc: max(1, n)}
	g.lda = n // B is k×n row-major
	if transB {
		g.lda = k // B is n×k
	}
	g.ldb = k // A is m×k
	if transA {
		g.ldb = m // A is k×m
	}
	g.lda, g.ldb = max(1, g.lda), max(1, g.ldb)
	return g
}

// MatMul is one cuBLAS GEMM on the compute stream (columnMajor maps the operands):
// on fp32 buffers cublasSgemm in GEMMFP32 mode, cublasGemmEx with bf16 tensor-core
// inputs in GEMMBF16; on bf16 buffers (the bf16 policy) cublasGemmEx with bf16 A,
// B and C and CUBLAS_COMPUTE_32F, whatever the mode.
func (d *Device) MatMul(c, a, b device.Buffer, transA, transB bool, m, n, k int, alpha, beta float32) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("%s: MatMul: negative size m=%d n=%d k=%d", d.name, m, n, k))
	}
	if m > math.MaxInt32 || n > math.MaxInt32 || k > math.MaxInt32 {
		panic(fmt.Sprintf("%s: MatMul: m=%d n=%d k=%d past cuBLAS's 32-bit sizes", d.name, m, n, k))
	}
	cb, ab, bb := d.get("MatMul C", c, m*n), d.get("MatMul A", a, m*k), d.get("MatMul B", b, k*n)
	dt := device.CheckDTypes(d.name, "MatMul", nil, c, a, b)
	if m == 0 || n == 0 {
		return
	}
	g := columnMajor(cb.ptr, ab.ptr, bb.ptr, transA, transB, m, n, k)
	mode := 0
	switch {
	case dt == device.BF16:
		mode = 2
	case d.opts.GEMM == GEMMBF16:
		mode = 1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostMatMul(dt, mode != 0, m, n, k, beta) })()
	d.issueBLAS("MatMul", func() int {
		return int(C.fsdp_sgemm(d.ctx, d.blas, C.int(mode), cbool(g.transA), cbool(g.transB), C.int(g.m), C.int(g.n),
			C.int(g.k), C.float(alpha), C.CUdeviceptr(g.a), C.int(g.lda), C.CUdeviceptr(g.b), C.int(g.ldb),
			C.float(beta), C.CUdeviceptr(g.c), C.int(g.ldc)))
	})
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

//go:build cgo

package cuda

import (
	"fmt"
	"testing"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// The benchmarks time ops on a real GPU (.ci/gpu-check runs them); over the
// fakes they would time the host.
func benchDevice(b *testing.B, o Options) *Device {
	b.Helper()
	if fakes.cuda != "" {
		b.Skip("times a real GPU: run with " + EnvTestLibraries + "=real")
	}
	d, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

func benchBuf(b *testing.B, d device.Device, n int) device.Buffer {
	buf, err := d.Alloc(n, device.Other)
	if err != nil {
		b.Fatal(err)
	}
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(i%7-3) / 8
	}
	d.CopyFromHost(buf, host)
	return buf
}

// timeGPU issues op b.N times and waits for the GPU to finish them all. The ops are
// asynchronous, so the time is taken around the final Sync: b.Loop's own timer
// stops before it and would time only the launches (an earlier version reported
// thousands of TFLOP/s that way).
func timeGPU(b *testing.B, d *Device, op func()) (int, time.Duration) {
	b.Helper()
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		op()
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op-synced")
	return b.N, elapsed
}

// BenchmarkMatMul reports TFLOP/s of square products in both GEMM modes, the
// shape of llama-1b's MLP projections (2048 × 8192 by a 4096-token batch).
func BenchmarkMatMul(b *testing.B) {
	for _, mode := range []struct {
		name string
		gemm GEMMMode
	}{{"fp32", GEMMFP32}, {"bf16", GEMMBF16}} {
		for _, s := range []struct{ m, n, k int }{{4096, 4096, 4096}, {4096, 8192, 2048}} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", mode.name, s.m, s.n, s.k), func(b *testing.B) {
				d := benchDevice(b, Options{GEMM: mode.gemm})
				a, x, c := benchBuf(b, d, s.m*s.k), benchBuf(b, d, s.n*s.k), benchBuf(b, d, s.m*s.n)
				d.MatMul(c, a, x, false, true, s.m, s.n, s.k, 1, 0)
				if err := d.Sync(); err != nil {
					b.Fatal(err)
				}
				n, elapsed := timeGPU(b, d, func() { d.MatMul(c, a, x, false, true, s.m, s.n, s.k, 1, 0) })
				b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(n)/elapsed.Seconds()/1e12, "TFLOP/s")
			})
		}
	}
}

// BenchmarkAttention times llama-1b's attention (32 heads, 8 kv heads, head dim
// 64) at seq 2048, forward and backward, in fp32 (the scalar kernels) and bf16 (the
// tensor-core kernels), reporting TFLOP/s of the causal product (forward
// 2·2·seq²/2·heads·headDim, backward 2.5× that, FlashAttention's convention).
func BenchmarkAttention(b *testing.B) {
	s := device.AttnShape{Batch: 1, Seq: 2048, Heads: 32, KVHeads: 8, HeadDim: 64}
	flops := 2.0 * 2 * float64(s.Seq) * float64(s.Seq) / 2 * float64(s.Heads*s.HeadDim)
	d := benchDevice(b, Options{})
	for _, dt := range []device.DType{device.F32, device.BF16} {
		buf := func(n int) device.Buffer { return benchBufDType(b, d, n, dt) }
		q, k, v := buf(s.QLen()), buf(s.KVLen()), buf(s.KVLen())
		out, lse := buf(s.QLen()), benchBuf(b, d, s.LSELen())
		dq, dk, dv := buf(s.QLen()), buf(s.KVLen()), buf(s.KVLen())
		b.Run(fmt.Sprintf("%v/forward", dt), func(b *testing.B) {
			n, elapsed := timeGPU(b, d, func() { d.AttentionForward(out, lse, q, k, v, s) })
			b.ReportMetric(flops*float64(n)/elapsed.Seconds()/1e12, "TFLOP/s")
		})
		b.Run(fmt.Sprintf("%v/backward", dt), func(b *testing.B) {
			n, elapsed := timeGPU(b, d, func() { d.AttentionBackward(dq, dk, dv, out, q, k, v, out, lse, s) })
			b.ReportMetric(2.5*flops*float64(n)/elapsed.Seconds()/1e12, "TFLOP/s")
		})
	}
}

// benchBufDType is benchBuf in dtype dt (bf16 through a cast of the fp32 values).
func benchBufDType(b *testing.B, d *Device, n int, dt device.DType) device.Buffer {
	b.Helper()
	src := benchBuf(b, d, n)
	if dt == device.F32 {
		return src
	}
	buf, err := d.AllocDType(n, dt, device.Other)
	if err != nil {
		b.Fatal(err)
	}
	d.Cast(buf, src)
	return buf
}

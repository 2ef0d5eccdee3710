package cpu

import (
	"fmt"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// BenchmarkGEMM measures square float32 matrix products through MatMul (gonum's
// pure-Go BLAS) and reports GFLOP/s (2n³ per product). Run with -cpu 1,2 to see the
// scaling over cores.
func BenchmarkGEMM(b *testing.B) {
	for _, n := range []int{512, 1024} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			d := New(Options{})
			a, x, c := benchBuf(b, d, n*n), benchBuf(b, d, n*n), benchBuf(b, d, n*n)
			for b.Loop() {
				d.MatMul(c, a, x, false, true, n, n, n, 1, 0)
			}
			b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func benchBuf(b *testing.B, d device.Device, n int) device.Buffer {
	buf, err := d.Alloc(n, device.Other)
	if err != nil {
		b.Fatal(err)
	}
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(i%7) - 3
	}
	d.CopyFromHost(buf, host)
	return buf
}

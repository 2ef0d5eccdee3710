package cpu

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// BenchmarkGEMM measures square float32 matrix products (C = A·Bᵀ, as a linear
// layer's forward) through MatMul on OpenBLAS and on gonum, and the same product
// in torch.matmul when /usr/bin/python3 has torch, in the same run, so the
// figures compare on a machine shared with other work. Each reports GFLOP/s
// (2n³ per product). Run with -cpu 1,2 to see the scaling over cores (torch uses
// its own thread count, all cores unless OMP_NUM_THREADS says otherwise). torch
// inherits this process's environment, OPENBLAS_THREAD_TIMEOUT as package
// openblas set it included, so both sides run OpenBLAS alike.
func BenchmarkGEMM(b *testing.B) {
	for _, n := range []int{256, 1024} {
		flops := 2 * float64(n) * float64(n) * float64(n)
		for _, blas := range []string{BLASAuto, BLASGonum} {
			d := New(Options{BLAS: blas})
			b.Run(fmt.Sprintf("n=%d/%s", n, d.(BLASReporter).BLAS().Name), func(b *testing.B) {
				a, x, c := benchBuf(b, d, n*n), benchBuf(b, d, n*n), benchBuf(b, d, n*n)
				for b.Loop() {
					d.MatMul(c, a, x, false, true, n, n, n, 1, 0)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
		b.Run(fmt.Sprintf("n=%d/torch", n), func(b *testing.B) {
			// About 0.1 TFLOP per measurement, whatever b.N: the interpreter's start
			// is outside the time torch measures but inside the benchmark's ns/op.
			iters := min(max(int(1e11/flops), 10), 10000)
			sec := torchGEMM(b, n, iters)
			b.ReportMetric(flops*float64(iters)/sec/1e9, "GFLOP/s")
		})
	}
}

// torchScript times iters products of n×n float32 matrices in torch.matmul after
// a warm-up, and prints the seconds they took.
const torchScript = `import sys, time, torch
n, iters = int(sys.argv[1]), int(sys.argv[2])
a, b = torch.randn(n, n), torch.randn(n, n)
for _ in range(3): torch.matmul(a, b.t())
t = time.perf_counter()
for _ in range(iters): torch.matmul(a, b.t())
print(time.perf_counter() - t)`

// torchGEMM runs torchScript and returns the seconds it measured; it skips the
// benchmark when torch is not there.
func torchGEMM(b *testing.B, n, iters int) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", torchScript, strconv.Itoa(n), strconv.Itoa(iters)).Output()
	if err != nil {
		b.Skipf("torch.matmul not measured: /usr/bin/python3 with torch failed: %v", err)
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || !(sec > 0) {
		b.Fatalf("torch script printed %q, want the seconds it measured", out)
	}
	return sec
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

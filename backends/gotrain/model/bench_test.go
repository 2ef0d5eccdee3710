package model

import (
	"fmt"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// BenchmarkForwardBackward measures tokens/s of one forward and backward on the
// float32 cpu device: tiny at seq 128, batch 4 with and without activation
// checkpointing, and issue 16's model (sweeps/examples/models/llama-h256-l4: hidden
// 256, 4 layers, vocab 4096) at the same seq and batch on OpenBLAS (when it loads)
// and on gonum. Run with -cpu 1,2 for one core and both, and -cpuprofile to see
// where a step goes.
func BenchmarkForwardBackward(b *testing.B) {
	const batch, seq = 4, 128
	h256, err := shapes.ReadConfig("../../../sweeps/examples/models/llama-h256-l4/config.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		shape      shapes.Shape
		blas       string
		checkpoint bool
	}{
		{tinyShape(b), cpu.BLASAuto, false}, {tinyShape(b), cpu.BLASAuto, true},
		{h256, cpu.BLASAuto, false}, {h256, cpu.BLASGonum, false},
	} {
		d := cpu.New(cpu.Options{BLAS: bc.blas})
		blas := d.(cpu.BLASReporter).BLAS().Name
		b.Run(fmt.Sprintf("%s/seq=%d/batch=%d/checkpoint=%v/blas=%s", bc.shape.Name, seq, batch, bc.checkpoint, blas), func(b *testing.B) {
			st := newSetup(b, d, bc.shape, 0)
			inputs, targets, err := Batch(0, 0, batch, seq, st.m.Shape.Vocab)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, bc.checkpoint); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(batch*seq*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

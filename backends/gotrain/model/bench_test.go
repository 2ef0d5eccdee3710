package model

import (
	"fmt"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
)

// BenchmarkForwardBackward measures tokens/s of one forward and backward of the
// tiny model at seq 128, batch 4 on the float32 cpu device, with and without
// activation checkpointing. Run with -cpu 1,2 for one core and both.
func BenchmarkForwardBackward(b *testing.B) {
	const batch, seq = 4, 128
	for _, checkpoint := range []bool{false, true} {
		b.Run(fmt.Sprintf("tiny/seq=%d/batch=%d/checkpoint=%v", seq, batch, checkpoint), func(b *testing.B) {
			st := newSetup(b, cpu.New(cpu.Options{}), tinyShape(b), 0)
			inputs, targets, err := Batch(0, 0, batch, seq, st.m.Shape.Vocab)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, checkpoint); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(batch*seq*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

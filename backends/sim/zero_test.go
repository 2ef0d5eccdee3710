package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestZeROFigure1(t *testing.T) {
	// Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B parameters, N_d = 64 devices,
	// K = 12 (mixed-precision Adam), memory per device in GB as the paper prints it.
	const psi, nd = 7_500_000_000, 64
	k := BytesPerParam{Param: 2, Grad: 2, Optimizer: 12}
	tests := []struct {
		name  string
		stage int
		gb    float64
	}{
		{"baseline DP", Stage0, 120},
		{"P_os", Stage1, 31.4},
		{"P_os+g", Stage2, 16.6},
		{"P_os+g+p", Stage3, 1.9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := float64(ModelStateBytes(psi, tt.stage, nd, k)) / 1e9
			assert.InDelta(t, tt.gb, got, 0.05, "the paper rounds to 0.1 GB")
		})
	}
}

func TestModelStatesSplit(t *testing.T) {
	const p = 1000
	b := StateBytes(sweeps.BF16)
	assert.Equal(t, BytesPerParam{2, 2, 12}, b)
	assert.Equal(t, int64(16), b.Total())
	fp32 := StateBytes(sweeps.FP32)
	assert.Equal(t, BytesPerParam{4, 4, 8}, fp32, "no master copy in fp32")
	assert.Equal(t, b.Total(), fp32.Total())

	// Each stage partitions one more state; n = 1 partitions nothing.
	s1 := ModelStates(p, Stage1, 4, b)
	assert.Equal(t, ModelState{Params: 2000, Grads: 2000, Optimizer: 3000}, s1)
	s2 := ModelStates(p, Stage2, 4, b)
	assert.Equal(t, ModelState{Params: 2000, Grads: 500, Optimizer: 3000}, s2)
	s3 := ModelStates(p, Stage3, 4, b)
	assert.Equal(t, ModelState{Params: 500, Grads: 500, Optimizer: 3000}, s3)
	for st := Stage0; st <= Stage3; st++ {
		assert.Equal(t, int64(p)*b.Total(), ModelStateBytes(p, st, 1, b))
	}
	// An uneven split is padded, as FSDP pads the flat parameter.
	assert.Equal(t, int64(334)*16, ModelStateBytes(p, Stage3, 3, b))
}

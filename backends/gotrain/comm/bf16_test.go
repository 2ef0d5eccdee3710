package comm

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
)

// TestAllGatherBF16 all-gathers bf16 cpu buffers of odd and even lengths over the
// TCP ring: every value arrives bit for bit (signed zeros, infinities, a NaN
// payload included) and the ring moves 2 bytes an element (⌈n/2⌉ words a rank);
// reductions of bf16 buffers are refused.
func TestAllGatherBF16(t *testing.T) {
	const size = 3
	for _, n := range []int{1, 6, 7} {
		comms := newGroup(t, size, Options{})
		ctx := context.Background()
		inputs := make([][]float32, size)
		for r := range inputs {
			inputs[r] = rankData(r, n)
			for i := range inputs[r] {
				inputs[r][i] = device.RoundBF16(inputs[r][i])
			}
		}
		inputs[0][0] = float32(math.Copysign(0, -1))
		if n > 1 {
			inputs[1][1] = float32(math.Inf(-1))
		}
		inputs[2][n-1] = math.Float32frombits(0x7fc10000)
		gathered := make([][]float32, size)
		run(t, comms, func(r int, c Communicator) error {
			d := cpu.New(cpu.Options{}).(device.MixedPrecision)
			src, err := d.AllocDType(n, device.BF16, device.Comm)
			require.NoError(t, err)
			dst, err := d.AllocDType(n*size, device.BF16, device.Comm)
			require.NoError(t, err)
			d.CopyFromHost(src, inputs[r])
			if err := OnBuffers(c).AllGatherBuffers(ctx, dst, src); err != nil {
				return err
			}
			gathered[r] = make([]float32, n*size)
			d.CopyToHost(gathered[r], dst)
			assert.ErrorContains(t, OnBuffers(c).AllReduceBuffers(ctx, dst, Sum), "reductions run in float32")
			f32, err := d.Alloc(n*size, device.Comm)
			require.NoError(t, err)
			assert.ErrorContains(t, OnBuffers(c).AllGatherBuffers(ctx, f32, src), "one dtype")
			return nil
		})
		for r := range size {
			for j := range size {
				for i := range n {
					assert.Equal(t, math.Float32bits(inputs[j][i]), math.Float32bits(gathered[r][j*n+i]), "n %d rank %d element %d of rank %d", n, r, i, j)
				}
			}
			words := int64((n + 1) / 2)
			assert.Equal(t, 4*words*(size-1), comms[r].Stats().AllGather.BytesSent, "n %d rank %d: 2 bytes an element", n, r)
		}
	}
}

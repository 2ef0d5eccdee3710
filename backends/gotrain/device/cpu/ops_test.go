package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
)

// TestOpGradients checks every small op case of the conformance suite
// (devicetest.OpCases) by central finite differences of its forward on the
// float64 device, and that backward adds into gradients. The suite itself
// (conformance_test.go) compares the float32 device, and every other device,
// with this one.
func TestOpGradients(t *testing.T) {
	for _, c := range devicetest.OpCases() {
		if !c.Small {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(c.Name))))
			d64 := New(Options{Float64: true})
			in64 := devicetest.Upload(t, d64, c.Inputs)
			o, _ := c.Run(t, d64, in64, nil, 0)
			out := read(o)
			require.NotEmpty(t, out)
			dout := devicetest.Randoms(rng, len(out), 1)
			if c.Dout != nil {
				dout = c.Dout(len(out))
			}
			_, gb := c.Run(t, d64, in64, dout, 1)
			grads := readAll(gb)
			require.NotEmpty(t, grads)

			objective := func() float64 {
				o, _ := c.Run(t, d64, in64, nil, 0)
				s := 0.0
				for i, v := range read(o) {
					s += dout[i] * v
				}
				return s
			}
			for _, name := range devicetest.SortedKeys(grads) {
				x := in64[name].(*buffer[float64]).data
				const h = 1e-5
				for i := range x {
					save := x[i]
					x[i] = save + h
					fp := objective()
					x[i] = save - h
					fm := objective()
					x[i] = save
					num := (fp - fm) / (2 * h)
					assert.InDelta(t, num, grads[name][i], 1e-7+1e-6*math.Abs(num),
						"d/d%s[%d]: finite difference %g, backward %g", name, i, num, grads[name][i])
				}
			}

			if !c.Overwrites {
				_, tb := c.Run(t, d64, in64, dout, 2)
				twice := readAll(tb)
				for name, g := range grads {
					for i := range g {
						assert.InDelta(t, 2*g[i], twice[name][i], 1e-12*(1+math.Abs(g[i])),
							"backward must add into d%s[%d]", name, i)
					}
				}
			}
		})
	}
}

// ---- helpers ----

// read returns a buffer's elements as float64, without rounding on float64.
func read(b device.Buffer) []float64 {
	switch x := b.(type) {
	case *buffer[float64]:
		return slices.Clone(x.data)
	case *buffer[float32]:
		out := make([]float64, len(x.data))
		for i, f := range x.data {
			out[i] = float64(f)
		}
		return out
	}
	panic(fmt.Sprintf("read of %T", b))
}

func readAll(bufs map[string]device.Buffer) map[string][]float64 {
	out := make(map[string][]float64, len(bufs))
	for name, b := range bufs {
		out[name] = read(b)
	}
	return out
}

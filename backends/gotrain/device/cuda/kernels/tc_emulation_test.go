package kernels_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The runner's tensor-core primitives against the PTX ISA's fragment layouts
// ("Matrix fragments for mma.m16n8k16 with floating point type" and "Warp-level
// matrix load instruction: ldmatrix"), written out here independently of the C++
// emulation. With g = lane>>2 and t = lane%4, and element 2r (low half) and 2r+1
// (high half) of register r:
//   - ldmatrix: register j of a lane holds row g, columns 2t and 2t+1 of matrix j;
//     with .trans, column g of rows 2t and 2t+1.
//   - A (16×16): a_i at row g + 8·((i>>1)&1), column 2t + (i&1) + 8·(i>>2).
//   - B (16×8): b_i at row 2t + (i&1) + 8·(i>>1), column g.
//   - C, D (16×8 f32): c_i at row g + 8·(i>>1), column 2t + (i&1).

func u32s(b []byte) []uint32 {
	x := make([]uint32, len(b)/4)
	for i := range x {
		x[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return x
}

func u32b(x []uint32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

func pair(lo, hi int) uint32 { return uint32(lo) | uint32(hi)<<16 }

func TestTensorCorePrimitives(t *testing.T) {
	fb := checksFatbin(t)
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := startDriver(t, built.Driver, fb, o.reverse, nil)
			defer d.close()

			// ldmatrix: matrix j's element (r, c) is 64j + 8r + c.
			m := func(j, r, c int) int { return 64*j + 8*r + c }
			got := u32s(d.run(t, check("check_ldmatrix", 512), grid1(1), 512, [][]byte{make([]byte, 4*14*64)}, buf(0))[0])
			for i := range 64 {
				lane := i % 32
				g, tt := lane>>2, lane&3
				var want []uint32
				for j := range 4 {
					want = append(want, pair(m(j, g, 2*tt), m(j, g, 2*tt+1)))
				}
				for j := range 4 {
					want = append(want, pair(m(j, 2*tt, g), m(j, 2*tt+1, g)))
				}
				want = append(want, want[0], want[1], want[4], want[5], want[0], want[4])
				require.Equal(t, want, got[14*i:14*i+14], "ldmatrix: thread %d (x4, x4.trans, x2, x2.trans, x1, x1.trans)", i)
			}

			// mma.sync m16n8k16: small integers, so every product and sum is exact.
			rng := rand.New(rand.NewPCG(1, 2))
			var A [16][16]float32
			var B [16][8]float32
			var C [16][8]float32
			for r := range 16 {
				for c := range 16 {
					A[r][c] = float32(rng.IntN(17) - 8)
				}
				for c := range 8 {
					B[r][c] = float32(rng.IntN(17) - 8)
					C[r][c] = float32(rng.IntN(101) - 50)
				}
			}
			bits := func(f float32) int { return int(math.Float32bits(f) >> 16) } // exact: small integers
			in := make([]uint32, 10*64)
			for i := range 64 {
				lane := i % 32
				g, tt := lane>>2, lane&3
				var a [8]int
				for k := range 8 {
					a[k] = bits(A[g+8*((k>>1)&1)][2*tt+(k&1)+8*(k>>2)])
				}
				var b [4]int
				for k := range 4 {
					b[k] = bits(B[2*tt+(k&1)+8*(k>>1)][g])
				}
				o := in[10*i:]
				for r := range 4 {
					o[r] = pair(a[2*r], a[2*r+1])
				}
				o[4], o[5] = pair(b[0], b[1]), pair(b[2], b[3])
				for k := range 4 {
					o[6+k] = math.Float32bits(C[g+8*(k>>1)][2*tt+(k&1)])
				}
			}
			got = u32s(d.run(t, check("check_mma", 0), grid1(1), 0, [][]byte{u32b(in)}, buf(0))[0])
			for i := range 64 {
				lane := i % 32
				g, tt := lane>>2, lane&3
				for k := range 4 {
					r, c := g+8*(k>>1), 2*tt+(k&1)
					want := C[r][c]
					for kk := range 16 {
						want += A[r][kk] * B[kk][c]
					}
					require.Equal(t, want, math.Float32frombits(got[10*i+6+k]), "mma: thread %d d%d = D[%d][%d]", i, k, r, c)
				}
			}

			// cp.async: a whole 16-byte copy and one of 4 source bytes, zero-filled.
			src := make([]uint32, 8*64)
			for i := range src {
				src[i] = uint32(1000 + i)
			}
			got = u32s(d.run(t, check("check_cp_async", 4*8*64), grid1(1), 4*8*64, [][]byte{u32b(src)}, buf(0))[0])
			for i := range 64 {
				s := src[8*i:]
				require.Equal(t, []uint32{s[0], s[1], s[2], s[3], s[4], 0, 0, 0}, got[8*i:8*i+8], "cp.async: thread %d", i)
			}
		})
	}
}

package model

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

func tinyShape(t testing.TB) shapes.Shape {
	t.Helper()
	s, err := shapes.Lookup("tiny")
	require.NoError(t, err)
	return s
}

func TestLayoutMatchesShape(t *testing.T) {
	for _, name := range []string{"tiny", "llama3-8b", "mistral-7b", "codellama-7b"} {
		t.Run(name, func(t *testing.T) {
			s, err := shapes.Lookup(name)
			require.NoError(t, err)
			units, err := Layout(s)
			require.NoError(t, err)
			require.Len(t, units, s.Layers+2)

			total := 0
			for i, u := range units {
				assert.Equal(t, i, u.Index)
				next := 0
				for _, tn := range u.Tensors {
					assert.Equal(t, next, tn.Offset, "%s packed without padding", tn.Name)
					next += tn.Size
				}
				assert.Equal(t, next, u.Size)
				total += u.Size
			}
			assert.Equal(t, s.Params(), int64(total), "parameters in the layout")
			assert.Equal(t, s.BlockParams(), int64(units[1].Size))
			assert.Equal(t, "embedding", units[0].Name)
			assert.Equal(t, fmt.Sprintf("layers.%d", s.Layers-1), units[s.Layers].Name)
			assert.Equal(t, []string{"model.norm.weight", "lm_head.weight"}, tensorNames(units[s.Layers+1]))
		})
	}
}

func TestLayoutOfTiny(t *testing.T) {
	units, err := Layout(tinyShape(t))
	require.NoError(t, err)
	b := units[1]
	assert.Equal(t, []string{
		"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
		"model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
		"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
		"model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
		"model.layers.0.post_attention_layernorm.weight",
	}, tensorNames(b))
	// tiny: hidden 64, 4 heads of 16, 2 kv heads, intermediate 128.
	assert.Equal(t, []int{64, 64}, b.Tensors[tq].Shape)
	assert.Equal(t, []int{32, 64}, b.Tensors[tk].Shape)
	assert.Equal(t, []int{64, 128}, b.Tensors[tDown].Shape)
	assert.Equal(t, InitOnes, b.Tensors[tMLPNorm].Init)
	assert.InDelta(t, InitStd/math.Sqrt(4), b.Tensors[to].Std, 1e-15, "residual projections scaled by 1/sqrt(2·layers)")
	assert.InDelta(t, InitStd, b.Tensors[tGate].Std, 0)
}

func TestLayoutRefusesWhatIsNotImplemented(t *testing.T) {
	tiny := tinyShape(t)
	gpt2, err := shapes.Lookup("gpt2-124m")
	require.NoError(t, err)
	tied, err := shapes.Lookup("llama-1b")
	require.NoError(t, err)
	with := func(f func(*shapes.Shape)) shapes.Shape {
		s := tiny
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name  string
		shape shapes.Shape
		want  string
	}{
		{"gpt2", gpt2, "architecture \"gpt2\""},
		{"tied head", tied, "untied head"},
		{"biases", with(func(s *shapes.Shape) { s.QKVBias = true }), "biases"},
		{"zero layers", with(func(s *shapes.Shape) { s.Layers = 0 }), "must all be positive"},
		{"heads do not divide hidden", with(func(s *shapes.Shape) { s.Heads = 3 }), "not a multiple of heads"},
		{"kv heads do not divide heads", with(func(s *shapes.Shape) { s.KVHeads = 3 }), "not a multiple of kv_heads"},
		{"odd head dim", with(func(s *shapes.Shape) { s.Hidden, s.Heads, s.KVHeads = 36, 4, 4 }), "odd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Layout(tc.shape)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestSplitMix64Reference checks the generator against the outputs of Vigna's
// reference splitmix64.c seeded with 0 (also java.util.SplittableRandom's mixer).
func TestSplitMix64Reference(t *testing.T) {
	assert.Equal(t, []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f},
		[]uint64{splitmix64(0, 0), splitmix64(0, 1), splitmix64(0, 2)})
}

func TestNormalIsStandard(t *testing.T) {
	const n = 200000
	sum, sumSq := 0.0, 0.0
	for j := range uint64(n) {
		z := normal(42, j)
		sum += z
		sumSq += z * z
	}
	mean, variance := sum/n, sumSq/n-(sum/n)*(sum/n)
	// Standard errors: 1/sqrt(n) for the mean, sqrt(2/n) for the variance; 5 of them.
	assert.InDelta(t, 0, mean, 5/math.Sqrt(n))
	assert.InDelta(t, 1, variance, 5*math.Sqrt(2.0/n))
}

func TestUnitInit(t *testing.T) {
	units, err := Layout(tinyShape(t))
	require.NoError(t, err)
	u := units[1]
	full := make([]float32, u.Size+7) // FSDP pads the end
	require.NoError(t, u.Init(3, 0, full))

	t.Run("independent of sharding", func(t *testing.T) {
		for _, shards := range []int{2, 3, 4} {
			shard := (len(full) + shards - 1) / shards
			var joined []float32
			for r := range shards {
				part := make([]float32, shard)
				require.NoError(t, u.Init(3, r*shard, part))
				joined = append(joined, part...)
			}
			assert.Equal(t, full, joined[:len(full)], "%d shards", shards)
		}
	})
	t.Run("padding is zero", func(t *testing.T) {
		assert.Equal(t, make([]float32, 7), full[u.Size:])
	})
	t.Run("norms are ones", func(t *testing.T) {
		n := u.Tensors[tAttnNorm]
		assert.Equal(t, slices.Repeat([]float32{1}, n.Size), full[n.Offset:n.Offset+n.Size])
	})
	t.Run("normal tensors have their std", func(t *testing.T) {
		for _, tn := range u.Tensors {
			if tn.Init != InitNormal {
				continue
			}
			sumSq := 0.0
			for _, v := range full[tn.Offset : tn.Offset+tn.Size] {
				sumSq += float64(v) * float64(v)
			}
			std := math.Sqrt(sumSq / float64(tn.Size))
			// The sample std's relative standard error is 1/sqrt(2n); allow 5.
			assert.InDelta(t, tn.Std, std, 5*tn.Std/math.Sqrt(2*float64(tn.Size)), tn.Name)
		}
	})
	t.Run("keyed by seed and name", func(t *testing.T) {
		other := make([]float32, u.Size)
		require.NoError(t, u.Init(4, 0, other))
		assert.NotEqual(t, full[:u.Size], other)
		q, k := u.Tensors[tq], u.Tensors[tk]
		assert.NotEqual(t, full[q.Offset:q.Offset+k.Size], full[k.Offset:k.Offset+k.Size])
		block2 := make([]float32, units[2].Size)
		require.NoError(t, units[2].Init(3, 0, block2))
		assert.NotEqual(t, full[:u.Size], block2, "layers.0 and layers.1 differ")
	})
	require.Error(t, u.Init(3, -1, full))
}

func TestBatch(t *testing.T) {
	const seed, seq, vocab = 9, 16, 50
	in, tg, err := Batch(seed, 0, 4, seq, vocab)
	require.NoError(t, err)
	require.Len(t, in, 4*seq)
	require.Len(t, tg, 4*seq)
	for s := range 4 {
		assert.Equal(t, in[s*seq+1:(s+1)*seq], tg[s*seq:(s+1)*seq-1], "targets are the inputs shifted by one")
	}
	for _, v := range append(slices.Clone(in), tg...) {
		require.True(t, v >= 0 && v < vocab, "token %d in range", v)
	}

	in2, tg2, err := Batch(seed, 2, 2, seq, vocab)
	require.NoError(t, err)
	assert.Equal(t, in[2*seq:], in2, "a sample depends only on its global index")
	assert.Equal(t, tg[2*seq:], tg2)

	in3, _, err := Batch(seed+1, 0, 4, seq, vocab)
	require.NoError(t, err)
	assert.NotEqual(t, in, in3)

	for _, bad := range [][4]int{{-1, 1, 8, 8}, {0, -1, 8, 8}, {0, 1, 0, 8}, {0, 1, 8, 0}} {
		_, _, err := Batch(seed, bad[0], bad[1], bad[2], bad[3])
		assert.Error(t, err, "Batch%v", bad)
	}
}

func tensorNames(u Unit) []string {
	var names []string
	for _, t := range u.Tensors {
		names = append(names, t.Name)
	}
	return names
}

package model

import (
	"fmt"
	"math"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// InitKind says how a tensor is initialized.
type InitKind int

// Initializations.
const (
	// InitNormal draws normal(0, Std) values (see Unit.Init).
	InitNormal InitKind = iota
	// InitOnes sets every element to 1 (RMSNorm weights).
	InitOnes
)

// Tensor is one parameter tensor inside its unit's flat buffer.
type Tensor struct {
	// Name is the tensor's Hugging Face LlamaForCausalLM name, so a PyTorch script
	// can load the same values into transformers' model by name.
	Name string
	// Shape is [out, in] for projections (nn.Linear's weight layout: y = x·Wᵀ),
	// [vocab, hidden] for the embedding and the head, [hidden] for norms.
	Shape []int
	// Offset is the tensor's first element in the unit's flat buffer; Size its
	// number of elements. Tensors are packed in order with no padding between them.
	Offset, Size int
	Init         InitKind
	// Std is the standard deviation of an InitNormal tensor.
	Std float64
}

// Unit is one FSDP wrap unit: the parameters that are gathered, used and freed
// together, stored as one flat buffer.
type Unit struct {
	// Index is the unit's place in the model: 0 the embedding, 1..layers the
	// transformer blocks, layers+1 the final norm and output head.
	Index int
	// Name is "embedding", "layers.<i>" (0-based block index) or "head".
	Name    string
	Tensors []Tensor
	// Size is the number of elements of the flat buffer, the sum of the tensors'.
	Size int
}

// Positions of a block's tensors in Unit.Tensors.
const (
	tq = iota
	tk
	tv
	to
	tGate
	tUp
	tDown
	tAttnNorm
	tMLPNorm
	blockTensors
	// tGateUp is not a tensor of the layout but a view Pass.views adds to a
	// block's: gate_proj and up_proj together ([2·intermediate, hidden], packed
	// back to back), the weight of the fused gate|up GEMM (device.FusedOps).
	tGateUp = blockTensors
)

// Positions of the head unit's tensors.
const (
	tFinalNorm = iota
	tOutput
)

// Defaults for shapes that leave them out (a Shape literal in a test).
const (
	defaultNormEps   = 1e-5
	defaultRopeTheta = 10000
)

// InitStd is the standard deviation of normal-initialized weights (GPT-2's 0.02).
// The two projections that write into the residual stream (o_proj, down_proj) use
// InitStd/sqrt(2·layers), GPT-2's scaling, so the stream's variance does not grow
// with depth.
const InitStd = 0.02

// Layout returns the model's units in order with every tensor's place in its
// unit's flat buffer. The layout is fixed, so that a PyTorch reference can build
// the same flat parameters:
//
//	unit 0        "embedding": model.embed_tokens.weight [vocab, hidden]
//	unit 1+i      "layers.<i>", in the order of Hugging Face's
//	              LlamaDecoderLayer.named_parameters() (the order PyTorch FSDP
//	              flattens them in):
//	                model.layers.<i>.self_attn.q_proj.weight    [heads·headDim, hidden]
//	                model.layers.<i>.self_attn.k_proj.weight    [kvHeads·headDim, hidden]
//	                model.layers.<i>.self_attn.v_proj.weight    [kvHeads·headDim, hidden]
//	                model.layers.<i>.self_attn.o_proj.weight    [hidden, heads·headDim]
//	                model.layers.<i>.mlp.gate_proj.weight       [intermediate, hidden]
//	                model.layers.<i>.mlp.up_proj.weight         [intermediate, hidden]
//	                model.layers.<i>.mlp.down_proj.weight       [hidden, intermediate]
//	                model.layers.<i>.input_layernorm.weight          [hidden]
//	                model.layers.<i>.post_attention_layernorm.weight [hidden]
//	unit layers+1 "head": model.norm.weight [hidden], lm_head.weight [vocab, hidden]
//
// Tensors are packed back to back from offset 0 with no padding; FSDP pads the
// flat buffer's end, never its inside. It refuses shapes the trainer does not
// implement (another architecture, biases, a tied head, heads that do not divide).
func Layout(s shapes.Shape) ([]Unit, error) {
	if err := check(s); err != nil {
		return nil, err
	}
	h, hd, in, vocab := s.Hidden, s.HeadDim(), s.Intermediate, s.Vocab
	qd, kvd := s.Heads*hd, s.KVDim()
	resid := InitStd / math.Sqrt(2*float64(s.Layers))

	units := make([]Unit, 0, s.Layers+2)
	units = append(units, newUnit(0, "embedding",
		Tensor{Name: "model.embed_tokens.weight", Shape: []int{vocab, h}, Std: InitStd}))
	for i := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		units = append(units, newUnit(i+1, fmt.Sprintf("layers.%d", i),
			Tensor{Name: p + "self_attn.q_proj.weight", Shape: []int{qd, h}, Std: InitStd},
			Tensor{Name: p + "self_attn.k_proj.weight", Shape: []int{kvd, h}, Std: InitStd},
			Tensor{Name: p + "self_attn.v_proj.weight", Shape: []int{kvd, h}, Std: InitStd},
			Tensor{Name: p + "self_attn.o_proj.weight", Shape: []int{h, qd}, Std: resid},
			Tensor{Name: p + "mlp.gate_proj.weight", Shape: []int{in, h}, Std: InitStd},
			Tensor{Name: p + "mlp.up_proj.weight", Shape: []int{in, h}, Std: InitStd},
			Tensor{Name: p + "mlp.down_proj.weight", Shape: []int{h, in}, Std: resid},
			Tensor{Name: p + "input_layernorm.weight", Shape: []int{h}, Init: InitOnes},
			Tensor{Name: p + "post_attention_layernorm.weight", Shape: []int{h}, Init: InitOnes},
		))
	}
	units = append(units, newUnit(s.Layers+1, "head",
		Tensor{Name: "model.norm.weight", Shape: []int{h}, Init: InitOnes},
		Tensor{Name: "lm_head.weight", Shape: []int{vocab, h}, Std: InitStd}))
	return units, nil
}

// newUnit packs tensors back to back.
func newUnit(index int, name string, tensors ...Tensor) Unit {
	u := Unit{Index: index, Name: name, Tensors: tensors}
	for i := range u.Tensors {
		t := &u.Tensors[i]
		t.Size = 1
		for _, d := range t.Shape {
			t.Size *= d
		}
		t.Offset = u.Size
		u.Size += t.Size
	}
	return u
}

// check refuses the shapes the trainer does not implement, saying what to change.
func check(s shapes.Shape) error {
	name := s.Name
	if name == "" {
		name = "(unnamed)"
	}
	switch {
	case s.Arch != shapes.ArchLlama:
		return fmt.Errorf("model %s: architecture %q is not implemented by the Go trainer; it trains %q shapes (RMSNorm, RoPE, SwiGLU)",
			name, s.Arch, shapes.ArchLlama)
	case s.QKVBias || s.OutBias || s.MLPBias:
		return fmt.Errorf("model %s: has biases (qkv %v, out %v, mlp %v); the Go trainer implements bias-free Llama layers only",
			name, s.QKVBias, s.OutBias, s.MLPBias)
	case s.TiedEmbeddings:
		return fmt.Errorf("model %s: ties the output head to the token embedding; the Go trainer needs an untied head (its own wrap unit), so use an untied shape",
			name)
	case s.Hidden <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.Intermediate <= 0 || s.Vocab <= 0:
		return fmt.Errorf("model %s: hidden %d, layers %d, heads %d, kv_heads %d, intermediate %d and vocab %d must all be positive",
			name, s.Hidden, s.Layers, s.Heads, s.KVHeads, s.Intermediate, s.Vocab)
	case s.Hidden%s.Heads != 0:
		return fmt.Errorf("model %s: hidden %d is not a multiple of heads %d", name, s.Hidden, s.Heads)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("model %s: heads %d is not a multiple of kv_heads %d (grouped-query attention shares each kv head among the same number of query heads)",
			name, s.Heads, s.KVHeads)
	case s.HeadDim()%2 != 0:
		return fmt.Errorf("model %s: head dim %d is odd; rotary embeddings rotate pairs of elements", name, s.HeadDim())
	case s.NormEps < 0 || s.RopeTheta < 0:
		return fmt.Errorf("model %s: norm_eps %g and rope_theta %g must not be negative", name, s.NormEps, s.RopeTheta)
	}
	return nil
}

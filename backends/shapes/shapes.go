// Package shapes holds model shapes: the built-in presets and a reader for Hugging
// Face config.json files. It is the one source of truth for model dimensions, used by
// the analytic model (sim) and the Go trainer alike.
package shapes

// Architecture families a Shape can describe.
const (
	ArchLlama = "llama" // RMSNorm, RoPE, SwiGLU MLP, optional GQA (Llama, Mistral, Qwen2)
	ArchGPT2  = "gpt2"  // LayerNorm, learned positions, GELU MLP, fused QKV with biases
)

// Shape is the dimensions of a decoder-only transformer.
type Shape struct {
	Name           string  `json:"name"`
	Arch           string  `json:"arch"`
	Hidden         int     `json:"hidden"`
	Layers         int     `json:"layers"`
	Heads          int     `json:"heads"`
	KVHeads        int     `json:"kv_heads"`
	Intermediate   int     `json:"intermediate"`
	Vocab          int     `json:"vocab"`
	MaxPositions   int     `json:"max_positions"`
	TiedEmbeddings bool    `json:"tied_embeddings"`
	RopeTheta      float64 `json:"rope_theta,omitempty"`
	NormEps        float64 `json:"norm_eps"`
}

// HeadDim is the width of one attention head.
func (s Shape) HeadDim() int { return s.Hidden / s.Heads }

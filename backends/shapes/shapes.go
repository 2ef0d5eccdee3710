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

	// The Llama family has no biases by default; Qwen2 adds them to the q, k and v
	// projections, and Llama's attention_bias / mlp_bias keys add them elsewhere.
	// (ArchGPT2 always has biases; these fields do not apply to it.)
	QKVBias bool `json:"qkv_bias,omitempty"`
	OutBias bool `json:"out_bias,omitempty"`
	MLPBias bool `json:"mlp_bias,omitempty"`

	// ModelType is config.json's model_type ("llama", "mistral", "qwen2", "gpt2"),
	// when the shape was read from one.
	ModelType string `json:"model_type,omitempty"`
	// Source is the config.json path the shape was read from; empty for a preset.
	Source string `json:"source,omitempty"`
}

// HeadDim is the width of one attention head.
func (s Shape) HeadDim() int { return s.Hidden / s.Heads }

// KVDim is the width of the key (and of the value) projection: kv_heads × head dim.
func (s Shape) KVDim() int { return s.KVHeads * s.HeadDim() }

// BlockParams is the parameter count of one transformer layer (attention, MLP and
// the layer's norms, with their biases).
func (s Shape) BlockParams() int64 {
	h, kv, in := int64(s.Hidden), int64(s.KVDim()), int64(s.Intermediate)
	switch s.Arch {
	case ArchGPT2:
		ln := 2 * h                   // LayerNorm: weight and bias
		attn := h*3*h + 3*h + h*h + h // c_attn (fused QKV) and c_proj, with biases
		mlp := h*in + in + in*h + h   // c_fc and c_proj, with biases
		return 2*ln + attn + mlp
	default:
		attn := h*h + 2*h*kv + h*h // q, k, v, o
		if s.QKVBias {
			attn += h + 2*kv
		}
		if s.OutBias {
			attn += h
		}
		mlp := 3 * h * in // gate, up, down
		if s.MLPBias {
			mlp += 2*in + h
		}
		return attn + mlp + 2*h // two RMSNorm weights
	}
}

// tokenEmbeddingParams is the vocab × hidden matrix of the input embedding.
func (s Shape) tokenEmbeddingParams() int64 { return int64(s.Vocab) * int64(s.Hidden) }

// positionEmbeddingParams is GPT-2's learned position table (RoPE models have none).
func (s Shape) positionEmbeddingParams() int64 {
	if s.Arch == ArchGPT2 {
		return int64(s.MaxPositions) * int64(s.Hidden)
	}
	return 0
}

// finalNormParams is the norm after the last layer (LayerNorm has a bias too).
func (s Shape) finalNormParams() int64 {
	if s.Arch == ArchGPT2 {
		return 2 * int64(s.Hidden)
	}
	return int64(s.Hidden)
}

// HeadParams is the parameter count of the output projection (LM head) when it is a
// matrix of its own; 0 when it is tied to the token embedding.
func (s Shape) HeadParams() int64 {
	if s.TiedEmbeddings {
		return 0
	}
	return s.tokenEmbeddingParams()
}

// Params is the exact parameter count: embeddings (token, and positions for GPT-2),
// every layer with its norms and biases, the final norm and the LM head. A tied head
// shares the token embedding and is counted once, as PyTorch's parameters() does.
func (s Shape) Params() int64 {
	return s.tokenEmbeddingParams() + s.positionEmbeddingParams() +
		int64(s.Layers)*s.BlockParams() + s.finalNormParams() + s.HeadParams()
}

// EmbeddingParams counts the parameters that are only looked up, never multiplied:
// the position table, and the token embedding when the head is untied. A tied
// token embedding is also the LM head, a vocab × hidden matmul per token, so it is
// counted as a non-embedding parameter instead. This is what nanoGPT (tied GPT-2:
// subtracts only the positions) and torchtitan (untied Llama: subtracts only the
// token embedding) do when they count N for MFU, so the same model gets the same N
// whichever way its head is stored. EmbeddingParams + NonEmbeddingParams = Params.
func (s Shape) EmbeddingParams() int64 {
	e := s.positionEmbeddingParams()
	if !s.TiedEmbeddings {
		e += s.tokenEmbeddingParams()
	}
	return e
}

// NonEmbeddingParams is N of the FLOPs formula: every parameter that takes part in a
// matmul or a norm per token (the layers, the final norm and the LM head).
func (s Shape) NonEmbeddingParams() int64 { return s.Params() - s.EmbeddingParams() }

// FlopsPerToken is the model FLOPs of one training token (forward and backward) at
// sequence length seqLen, as PaLM defines them (Chowdhery et al. 2022, appendix B):
// 6N + 12·L·H·Q·T, where N = NonEmbeddingParams, L layers, H heads, Q head dim and
// T = seqLen. The 12·L·H·Q·T term is the attention score and value matmuls (2·T·Q
// multiply-adds per head per token forward, three times that with backward).
// Recomputation under activation checkpointing is not counted, so MFU stays
// comparable across checkpointing settings.
func (s Shape) FlopsPerToken(seqLen int) float64 {
	return 6*float64(s.NonEmbeddingParams()) +
		12*float64(s.Layers)*float64(s.Heads)*float64(s.HeadDim())*float64(seqLen)
}

package shapes

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tensor is one entry of a model's state dict: its Hugging Face name and shape.
type tensor struct {
	name  string
	shape []int
}

// stateDict lists the tensors of a shape as Hugging Face's modeling code creates
// them. It is an independent way to count parameters: the sum of its numels must
// equal Params, which is computed by formula.
func stateDict(s Shape) []tensor {
	h, in, kv := s.Hidden, s.Intermediate, s.KVDim()
	var ts []tensor
	add := func(name string, shape ...int) { ts = append(ts, tensor{name, shape}) }
	if s.Arch == ArchGPT2 {
		add("wte", s.Vocab, h)
		add("wpe", s.MaxPositions, h)
		for range s.Layers {
			add("ln_1.weight", h)
			add("ln_1.bias", h)
			add("attn.c_attn.weight", h, 3*h)
			add("attn.c_attn.bias", 3*h)
			add("attn.c_proj.weight", h, h)
			add("attn.c_proj.bias", h)
			add("ln_2.weight", h)
			add("ln_2.bias", h)
			add("mlp.c_fc.weight", h, in)
			add("mlp.c_fc.bias", in)
			add("mlp.c_proj.weight", in, h)
			add("mlp.c_proj.bias", h)
		}
		add("ln_f.weight", h)
		add("ln_f.bias", h)
		return ts // lm_head is tied to wte
	}
	add("embed_tokens", s.Vocab, h)
	for range s.Layers {
		add("q_proj.weight", h, h)
		add("k_proj.weight", kv, h)
		add("v_proj.weight", kv, h)
		add("o_proj.weight", h, h)
		if s.QKVBias {
			add("q_proj.bias", h)
			add("k_proj.bias", kv)
			add("v_proj.bias", kv)
		}
		if s.OutBias {
			add("o_proj.bias", h)
		}
		add("gate_proj.weight", in, h)
		add("up_proj.weight", in, h)
		add("down_proj.weight", h, in)
		if s.MLPBias {
			add("gate_proj.bias", in)
			add("up_proj.bias", in)
			add("down_proj.bias", h)
		}
		add("input_layernorm.weight", h)
		add("post_attention_layernorm.weight", h)
	}
	add("norm.weight", h)
	if !s.TiedEmbeddings {
		add("lm_head.weight", s.Vocab, h)
	}
	return ts
}

func numel(ts []tensor) int64 {
	var n int64
	for _, t := range ts {
		p := int64(1)
		for _, d := range t.shape {
			p *= int64(d)
		}
		n += p
	}
	return n
}

func TestParamsMatchPublishedCounts(t *testing.T) {
	// published is the count as the model card rounds it; the tolerance is half a
	// unit of its last digit. Sources: GPT-2 paper / nanoGPT (124M, 124.4M exact
	// from nanoGPT's printout before subtracting positions), Llama 3.2 1B card
	// (1.24B), Llama 3 8B card (8.03B), Mistral 7B v0.1 (7.24B), Code Llama 7B (6.74B).
	tests := []struct {
		preset    string
		published float64
		halfUnit  float64
	}{
		{"gpt2-124m", 124.4e6, 0.05e6},
		{"llama-1b", 1.24e9, 0.005e9},
		{"llama3-8b", 8.03e9, 0.005e9},
		{"mistral-7b", 7.24e9, 0.005e9},
		{"codellama-7b", 6.74e9, 0.005e9},
	}
	for _, tt := range tests {
		t.Run(tt.preset, func(t *testing.T) {
			s, err := Lookup(tt.preset)
			require.NoError(t, err)
			assert.InDelta(t, tt.published, float64(s.Params()), tt.halfUnit)
			assert.Equal(t, numel(stateDict(s)), s.Params(), "formula vs state-dict enumeration")
		})
	}
}

func TestEmbeddingSplit(t *testing.T) {
	for _, name := range Presets() {
		t.Run(name, func(t *testing.T) {
			s, err := Lookup(name)
			require.NoError(t, err)
			assert.Equal(t, s.Params(), s.EmbeddingParams()+s.NonEmbeddingParams())
			switch {
			case s.Arch == ArchGPT2:
				// nanoGPT's N: everything but the position table (wte is the head).
				assert.Equal(t, s.Params()-int64(s.MaxPositions*s.Hidden), s.NonEmbeddingParams())
			case s.TiedEmbeddings:
				assert.Equal(t, s.Params(), s.NonEmbeddingParams())
			default:
				// torchtitan's N: everything but the token embedding.
				assert.Equal(t, s.Params()-int64(s.Vocab*s.Hidden), s.NonEmbeddingParams())
			}
		})
	}
}

func TestFlopsPerToken(t *testing.T) {
	s, err := Lookup("llama3-8b")
	require.NoError(t, err)
	n := float64(s.NonEmbeddingParams())
	for _, T := range []int{512, 2048, 8192} {
		got := s.FlopsPerToken(T)
		// The attention term grows by 12·L·H·Q per extra position, and at T → 0 only
		// the 6N of the dense matmuls is left.
		assert.InDelta(t, 6*n, got-12*float64(s.Layers*s.Hidden*T), 1)
	}
	// The dense part dominates at short sequences: 6N is within 2% of the total at 512.
	assert.InEpsilon(t, 6*n, s.FlopsPerToken(512), 0.02)
}

func TestReadConfigMatchesPresets(t *testing.T) {
	tests := []struct {
		file, preset string
	}{
		{"gpt2/config.json", "gpt2-124m"},
		{"Llama-3.2-1B/config.json", "llama-1b"},
		{"Meta-Llama-3-8B/config.json", "llama3-8b"},
		{"Mistral-7B-v0.1/config.json", "mistral-7b"},
		{"CodeLlama-7b-hf/config.json", "codellama-7b"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			got, err := Lookup(path)
			require.NoError(t, err)
			want, err := Lookup(tt.preset)
			require.NoError(t, err)
			assert.Equal(t, filepath.Base(filepath.Dir(path)), got.Name)
			assert.Equal(t, path, got.Source)
			got.Name, got.Source, want.Name = "", "", ""
			assert.Equal(t, want, got)
		})
	}
}

func TestReadConfigQwen2Biases(t *testing.T) {
	s, err := Lookup("testdata/Qwen2-0.5B/config.json")
	require.NoError(t, err)
	assert.True(t, s.QKVBias)
	assert.False(t, s.OutBias)
	assert.True(t, s.TiedEmbeddings)
	assert.Equal(t, numel(stateDict(s)), s.Params())
	// Qwen2-0.5B's model card: 0.49B parameters.
	assert.InDelta(t, 0.49e9, float64(s.Params()), 0.005e9)
}

func TestParseConfigDefaults(t *testing.T) {
	// Keys Hugging Face defaults when absent: kv heads = heads, untied, theta 1e4,
	// eps 1e-6 for Llama; n_inner = 4·n_embd, tied, eps 1e-5 for GPT-2.
	llama, err := ParseConfig("x.json", []byte(`{"hidden_size": 256, "num_hidden_layers": 2,
		"num_attention_heads": 8, "intermediate_size": 512, "vocab_size": 1000,
		"max_position_embeddings": 128}`))
	require.NoError(t, err)
	assert.Equal(t, ArchLlama, llama.Arch)
	assert.Equal(t, 8, llama.KVHeads)
	assert.False(t, llama.TiedEmbeddings)
	assert.Equal(t, 1e4, llama.RopeTheta)
	assert.Equal(t, 1e-6, llama.NormEps)
	assert.Equal(t, "x", llama.Name)

	gpt, err := ParseConfig("g.json", []byte(`{"n_embd": 64, "n_layer": 2, "n_head": 4,
		"vocab_size": 100, "n_positions": 32, "n_inner": null}`))
	require.NoError(t, err)
	assert.Equal(t, ArchGPT2, gpt.Arch)
	assert.Equal(t, 256, gpt.Intermediate)
	assert.True(t, gpt.TiedEmbeddings)
	assert.Equal(t, 1e-5, gpt.NormEps)

	v5, err := ParseConfig("v5.json", []byte(`{"model_type": "llama", "hidden_size": 64,
		"num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128,
		"vocab_size": 10, "max_position_embeddings": 16, "rope_parameters": {"rope_theta": 5e5}}`))
	require.NoError(t, err)
	assert.Equal(t, 5e5, v5.RopeTheta)
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		file string // under testdata/, or "" to use data
		data string
		want []string // substrings of the error
	}{
		{name: "syntax error has line:column", file: "syntax-error.json",
			want: []string{"syntax-error.json:5:3:", "invalid JSON"}},
		{name: "missing key", file: "missing-intermediate.json",
			want: []string{"missing-intermediate.json: ", `key "intermediate_size"`, "missing"}},
		{name: "wrong type", file: "bad-type.json",
			want: []string{"bad-type.json:3:3:", `key "hidden_size"`, "got a JSON string, want an integer"}},
		{name: "no such file", file: "nope/config.json",
			want: []string{"nope/config.json", "no such file", "preset"}},
		{name: "bad value points at its key",
			data: "{\"model_type\": \"llama\",\n \"hidden_size\": 100, \"num_hidden_layers\": 2,\n \"num_attention_heads\": 3, \"intermediate_size\": 8, \"vocab_size\": 10, \"max_position_embeddings\": 8}",
			want: []string{"inline.json:3:2:", `key "num_attention_heads"`, "does not divide hidden_size 100"}},
		{name: "negative", data: `{"n_embd": -1, "n_layer": 1, "n_head": 1, "vocab_size": 2, "n_positions": 2}`,
			want: []string{`key "n_embd"`, "-1: must be a positive integer"}},
		{name: "gqa must divide", data: `{"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
			"num_key_value_heads": 3, "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 8}`,
			want: []string{`key "num_key_value_heads"`, "must divide num_attention_heads 4"}},
		{name: "head_dim other than hidden/heads", data: `{"hidden_size": 64, "num_hidden_layers": 1,
			"num_attention_heads": 4, "head_dim": 32, "intermediate_size": 8, "vocab_size": 10,
			"max_position_embeddings": 8}`,
			want: []string{`key "head_dim"`, "differs from hidden_size / num_attention_heads = 16"}},
		{name: "unsupported architecture", data: `{"model_type": "mixtral", "hidden_size": 64}`,
			want: []string{`key "model_type"`, `"mixtral" is not supported`, "gpt2, llama, mistral, qwen2"}},
		{name: "not a model config", data: `{"foo": 1}`,
			want: []string{"neither hidden_size", "n_embd"}},
		{name: "not an object", data: `[1, 2]`,
			want: []string{"inline.json:1:1:", "want"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.file != "" {
				_, err = Lookup(filepath.Join("testdata", tt.file))
			} else {
				_, err = ParseConfig("inline.json", []byte(tt.data))
			}
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLookupUnknownSuggests(t *testing.T) {
	tests := []struct{ in, suggestion string }{
		{"llama3-7b", "llama3-8b"},
		{"gpt2", "gpt2-124m"},
		{"Mistral-7B", "mistral-7b"},
		{"tinyy", "tiny"},
		{"bert-large-uncased", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			err := Check(tt.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "codellama-7b, gpt2-124m, llama-1b, llama3-8b, mistral-7b, tiny")
			if tt.suggestion != "" {
				assert.Contains(t, err.Error(), `did you mean "`+tt.suggestion+`"?`)
			} else {
				assert.NotContains(t, err.Error(), "did you mean")
			}
		})
	}
}

func TestIsPath(t *testing.T) {
	assert.True(t, IsPath("models/x/config.json"))
	assert.True(t, IsPath("config.json"))
	assert.True(t, IsPath("./tiny"))
	assert.False(t, IsPath("tiny"))
	assert.False(t, IsPath("llama3-8b"))
}

func TestTinyIsSmall(t *testing.T) {
	s, err := Lookup("tiny")
	require.NoError(t, err)
	assert.Equal(t, numel(stateDict(s)), s.Params())
	assert.Less(t, s.Params(), int64(200_000), "tiny must train on two CPU cores in seconds")
	assert.Equal(t, 16, s.HeadDim())
	assert.Equal(t, 32, s.KVDim())
}

func TestPresetsAreValidShapes(t *testing.T) {
	for _, name := range Presets() {
		s := presets[name]
		assert.Equal(t, name, s.Name)
		assert.Zero(t, s.Hidden%s.Heads, name)
		assert.Zero(t, s.Heads%s.KVHeads, name)
		assert.False(t, math.IsNaN(s.FlopsPerToken(128)))
	}
}

func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/config.json")
	more, _ := filepath.Glob("testdata/*.json")
	for _, p := range append(files, more...) {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(b)
	}
	// Issue 13: int64-max dimensions, deep nesting.
	f.Add([]byte(hugeConfig))
	f.Add([]byte(`{"model_type": "gpt2", "n_embd": 9223372036854775807, "n_layer": 1, "n_head": 1, "vocab_size": 1, "n_positions": 1}`))
	f.Add([]byte(`{"hidden_size": ` + strings.Repeat("[", 10_000)))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseConfig("fuzz.json", data)
		if err != nil {
			return
		}
		// Whatever parses is a usable shape whose counts cannot overflow.
		if s.Hidden <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.Hidden%s.Heads != 0 || s.Heads%s.KVHeads != 0 {
			t.Fatalf("accepted an unusable shape %+v", s)
		}
		if p := s.Params(); p <= 0 || p > 1<<53 {
			t.Fatalf("shape %+v has %d parameters", s, p)
		}
		_ = s.FlopsPerToken(1)
	})
}

// hugeConfig is a Llama config.json with every dimension at int64's maximum: it
// panicked plan (makeslice) before the dimensions were bounded.
const hugeConfig = `{"model_type": "llama", "hidden_size": 9223372036854775807, "num_hidden_layers": 9223372036854775807,
 "num_attention_heads": 1, "intermediate_size": 9223372036854775807, "vocab_size": 9223372036854775807,
 "max_position_embeddings": 9223372036854775807}`

// TestConfigBounds is issue 13 §3: a config.json's dimensions are bounded where
// they enter, and the file itself is read with bounds.
func TestConfigBounds(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"int64-max dimensions", hugeConfig, `fuzz.json:1:25: key "hidden_size": 9223372036854775807: must be at most 262144`},
		{"too many layers", `{"hidden_size": 64, "num_hidden_layers": 100000, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "max_position_embeddings": 16}`,
			`key "num_hidden_layers": 100000: must be at most 4096`},
		{"vocabulary", `{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000000000, "max_position_embeddings": 16}`,
			`key "vocab_size": 1000000000: must be at most 16777216`},
		{"deep nesting", `{"a": ` + strings.Repeat("[", 100_000), "fuzz.json:1:70: the model config.json nests arrays and objects deeper than 64 levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("fuzz.json", []byte(tc.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := ReadConfig("/dev/zero")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be a regular file, but this is a character device")
}

// TestReadConfigDuplicateKey: a config.json that gives hidden_size twice is
// refused at the second, naming the first (encoding/json would read 512 without
// a word); one saved with a UTF-8 byte order mark reads.
func TestReadConfigDuplicateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	body := "{\n  \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8,\n" +
		"  \"intermediate_size\": 512, \"vocab_size\": 1000, \"max_position_embeddings\": 128,\n  \"hidden_size\": 512\n}"
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	_, err := ReadConfig(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`:4:3: the key "hidden_size" is given twice in one object (first at line 2, column 3)`)

	bom := filepath.Join(dir, "bom.json")
	require.NoError(t, os.WriteFile(bom, []byte("\ufeff"+strings.Replace(body, ",\n  \"hidden_size\": 512", "", 1)), 0o644))
	s, err := ReadConfig(bom)
	require.NoError(t, err)
	assert.Equal(t, 256, s.Hidden)
}

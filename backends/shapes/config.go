package shapes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// hfConfig holds the keys of a Hugging Face config.json that decide a shape.
// Pointers tell a missing key (nil) from a zero value.
type hfConfig struct {
	ModelType  *string `json:"model_type"`
	NameOrPath string  `json:"_name_or_path"`

	// Llama, Mistral, Qwen2.
	HiddenSize            *int     `json:"hidden_size"`
	NumHiddenLayers       *int     `json:"num_hidden_layers"`
	NumAttentionHeads     *int     `json:"num_attention_heads"`
	NumKeyValueHeads      *int     `json:"num_key_value_heads"`
	IntermediateSize      *int     `json:"intermediate_size"`
	VocabSize             *int     `json:"vocab_size"`
	MaxPositionEmbeddings *int     `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool    `json:"tie_word_embeddings"`
	RopeTheta             *float64 `json:"rope_theta"`
	RMSNormEps            *float64 `json:"rms_norm_eps"`
	HeadDim               *int     `json:"head_dim"`
	AttentionBias         *bool    `json:"attention_bias"`
	MLPBias               *bool    `json:"mlp_bias"`
	// transformers v5 moves rope_theta into rope_parameters.
	RopeParameters *struct {
		RopeTheta *float64 `json:"rope_theta"`
	} `json:"rope_parameters"`

	// GPT-2.
	NEmbd            *int     `json:"n_embd"`
	NLayer           *int     `json:"n_layer"`
	NHead            *int     `json:"n_head"`
	NPositions       *int     `json:"n_positions"`
	NInner           *int     `json:"n_inner"`
	LayerNormEpsilon *float64 `json:"layer_norm_epsilon"`
}

// llamaFamily are the model_type values read as ArchLlama.
var llamaFamily = []string{"llama", "mistral", "qwen2"}

// ConfigError is a problem with a config.json: where it is and what is wrong.
// Line and Column are 1-based; 0 when the problem has no position (a missing key).
type ConfigError struct {
	Path   string
	Line   int
	Column int
	Key    string
	Msg    string
	Err    error
}

// Error formats the problem as path:line:col: message, as compilers do.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error (a JSON or file error), if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// ReadConfig reads the shape from a Hugging Face config.json at path.
func ReadConfig(path string) (Shape, error) {
	data, err := input.ReadFile(path, input.ModelConfig)
	if err != nil {
		return Shape{}, fmt.Errorf("model config %s: %w (give a preset name — %s — or the path of a Hugging Face config.json)",
			path, err, strings.Join(Presets(), ", "))
	}
	s, err := ParseConfig(path, input.TrimBOM(data))
	if err != nil {
		return Shape{}, err
	}
	s.Source = path
	return s, nil
}

// ParseConfig reads a shape from the bytes of a Hugging Face config.json; path only
// names the file in errors and the shape.
func ParseConfig(path string, data []byte) (Shape, error) {
	if err := input.CheckJSON(path, data, input.ModelConfig); err != nil {
		return Shape{}, err
	}
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return Shape{}, jsonError(path, data, err)
	}
	offsets := keyOffsets(data)
	keyErr := func(key, format string, args ...any) error {
		e := &ConfigError{Path: path, Key: key, Msg: fmt.Sprintf(format, args...)}
		if off, ok := offsets[key]; ok {
			e.Line, e.Column = lineCol(data, off)
		}
		return e
	}
	modelType := ""
	if c.ModelType != nil {
		modelType = *c.ModelType
	}
	switch {
	case modelType == "gpt2" || (modelType == "" && c.NEmbd != nil):
		return parseGPT2(path, c, keyErr)
	case slices.Contains(llamaFamily, modelType) || (modelType == "" && c.HiddenSize != nil):
		return parseLlama(path, c, modelType, keyErr)
	case modelType == "":
		return Shape{}, &ConfigError{Path: path, Msg: "neither hidden_size (Llama, Mistral, Qwen2) nor n_embd (GPT-2) is set: is this a model's config.json?"}
	default:
		return Shape{}, keyErr("model_type", "%q is not supported (supported: gpt2, %s): other architectures have shapes this tool does not model",
			modelType, strings.Join(llamaFamily, ", "))
	}
}

type keyErrFunc func(key, format string, args ...any) error

// Upper bounds of a config.json's dimensions: each is some 10x past the largest
// published model, and together they keep every count and byte figure derived from
// a shape (parameters below 2^53, bytes of model state below 2^58) inside an int64.
const (
	MaxHidden       = 1 << 18 // hidden_size, n_embd
	MaxLayers       = 4096    // num_hidden_layers, n_layer
	MaxHeads        = 1 << 14 // num_attention_heads, num_key_value_heads, n_head
	MaxIntermediate = 1 << 20 // intermediate_size, n_inner
	MaxVocab        = 1 << 24 // vocab_size
	MaxPositions    = 1 << 26 // max_position_embeddings, n_positions
)

// bounds gives each integer key its upper bound.
var bounds = map[string]int{
	"hidden_size": MaxHidden, "n_embd": MaxHidden,
	"num_hidden_layers": MaxLayers, "n_layer": MaxLayers,
	"num_attention_heads": MaxHeads, "num_key_value_heads": MaxHeads, "n_head": MaxHeads,
	"intermediate_size": MaxIntermediate, "n_inner": MaxIntermediate,
	"vocab_size":              MaxVocab,
	"max_position_embeddings": MaxPositions, "n_positions": MaxPositions,
}

// requiredInt reads a positive integer key, or explains what is missing or wrong.
func requiredInt(v *int, key string, keyErr keyErrFunc) (int, error) {
	if v == nil {
		return 0, keyErr(key, "missing (every Hugging Face config.json of this architecture has it; add it)")
	}
	if *v <= 0 {
		return 0, keyErr(key, "%d: must be a positive integer", *v)
	}
	if limit, ok := bounds[key]; ok && *v > limit {
		return 0, keyErr(key, "%d: must be at most %d (past any published model; is the file a model's config.json?)", *v, limit)
	}
	return *v, nil
}

// optional reads a positive integer key with a default for when it is absent.
func optional(v *int, def int, key string, keyErr keyErrFunc) (int, error) {
	if v == nil {
		return def, nil
	}
	return requiredInt(v, key, keyErr)
}

func positiveFloat(v *float64, def float64, key string, keyErr keyErrFunc) (float64, error) {
	if v == nil {
		return def, nil
	}
	if !(*v > 0) {
		return 0, keyErr(key, "%g: must be positive", *v)
	}
	return *v, nil
}

func parseLlama(path string, c hfConfig, modelType string, keyErr keyErrFunc) (Shape, error) {
	s := Shape{Name: configName(path, c), Arch: ArchLlama, ModelType: modelType}
	var err error
	for _, f := range []struct {
		dst *int
		v   *int
		key string
	}{
		{&s.Hidden, c.HiddenSize, "hidden_size"},
		{&s.Layers, c.NumHiddenLayers, "num_hidden_layers"},
		{&s.Heads, c.NumAttentionHeads, "num_attention_heads"},
		{&s.Intermediate, c.IntermediateSize, "intermediate_size"},
		{&s.Vocab, c.VocabSize, "vocab_size"},
		{&s.MaxPositions, c.MaxPositionEmbeddings, "max_position_embeddings"},
	} {
		if *f.dst, err = requiredInt(f.v, f.key, keyErr); err != nil {
			return Shape{}, err
		}
	}
	// Hugging Face's defaults for the Llama, Mistral and Qwen2 configs.
	if s.KVHeads, err = optional(c.NumKeyValueHeads, s.Heads, "num_key_value_heads", keyErr); err != nil {
		return Shape{}, err
	}
	s.TiedEmbeddings = c.TieWordEmbeddings != nil && *c.TieWordEmbeddings
	theta := c.RopeTheta
	if theta == nil && c.RopeParameters != nil {
		theta = c.RopeParameters.RopeTheta
	}
	if s.RopeTheta, err = positiveFloat(theta, 10000, "rope_theta", keyErr); err != nil {
		return Shape{}, err
	}
	if s.NormEps, err = positiveFloat(c.RMSNormEps, 1e-6, "rms_norm_eps", keyErr); err != nil {
		return Shape{}, err
	}
	// Qwen2 hard-codes biases on q, k and v; Llama switches them with attention_bias.
	if modelType == "qwen2" {
		s.QKVBias = true
	}
	if c.AttentionBias != nil && *c.AttentionBias {
		s.QKVBias, s.OutBias = true, true
	}
	s.MLPBias = c.MLPBias != nil && *c.MLPBias
	if s.Hidden%s.Heads != 0 {
		return Shape{}, keyErr("num_attention_heads", "%d does not divide hidden_size %d", s.Heads, s.Hidden)
	}
	if s.KVHeads > s.Heads || s.Heads%s.KVHeads != 0 {
		return Shape{}, keyErr("num_key_value_heads", "%d must divide num_attention_heads %d", s.KVHeads, s.Heads)
	}
	if c.HeadDim != nil && *c.HeadDim != s.HeadDim() {
		return Shape{}, keyErr("head_dim", "%d differs from hidden_size / num_attention_heads = %d, which this tool assumes",
			*c.HeadDim, s.HeadDim())
	}
	return s, nil
}

func parseGPT2(path string, c hfConfig, keyErr keyErrFunc) (Shape, error) {
	s := Shape{Name: configName(path, c), Arch: ArchGPT2, ModelType: "gpt2"}
	var err error
	for _, f := range []struct {
		dst *int
		v   *int
		key string
	}{
		{&s.Hidden, c.NEmbd, "n_embd"},
		{&s.Layers, c.NLayer, "n_layer"},
		{&s.Heads, c.NHead, "n_head"},
		{&s.Vocab, c.VocabSize, "vocab_size"},
		{&s.MaxPositions, c.NPositions, "n_positions"},
	} {
		if *f.dst, err = requiredInt(f.v, f.key, keyErr); err != nil {
			return Shape{}, err
		}
	}
	s.KVHeads = s.Heads
	// GPT2Config's defaults: n_inner null means 4 × n_embd; heads are tied.
	if s.Intermediate, err = optional(c.NInner, min(4*s.Hidden, MaxIntermediate), "n_inner", keyErr); err != nil {
		return Shape{}, err
	}
	s.TiedEmbeddings = c.TieWordEmbeddings == nil || *c.TieWordEmbeddings
	if s.NormEps, err = positiveFloat(c.LayerNormEpsilon, 1e-5, "layer_norm_epsilon", keyErr); err != nil {
		return Shape{}, err
	}
	if s.Hidden%s.Heads != 0 {
		return Shape{}, keyErr("n_head", "%d does not divide n_embd %d", s.Heads, s.Hidden)
	}
	return s, nil
}

// configName names a shape read from a file: the model's directory for a file called
// config.json (as Hugging Face checkouts are laid out), else the file's base name.
func configName(path string, c hfConfig) string {
	base := filepath.Base(path)
	if strings.EqualFold(base, "config.json") {
		if abs, err := filepath.Abs(path); err == nil {
			if dir := filepath.Base(filepath.Dir(abs)); dir != "" && dir != string(filepath.Separator) && dir != "." {
				return dir
			}
		}
		if c.NameOrPath != "" {
			return filepath.Base(c.NameOrPath)
		}
	}
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// jsonError turns encoding/json's errors, which carry a byte offset, into a
// ConfigError with line and column.
func jsonError(path string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off := max(syn.Offset-1, 0) // Offset is just past the byte that failed
		line, col := lineCol(data, off)
		return &ConfigError{Path: path, Line: line, Column: col, Msg: "invalid JSON: " + syn.Error(), Err: err}
	case errors.As(err, &typ):
		// Point at the key when it is a top-level one; else at the value's end.
		off, ok := keyOffsets(data)[typ.Field]
		if !ok {
			off = max(typ.Offset-1, 0)
		}
		line, col := lineCol(data, off)
		want := typ.Type.String()
		switch typ.Type.Kind() {
		case reflect.Int:
			want = "an integer"
		case reflect.Float64:
			want = "a number"
		case reflect.Bool:
			want = "true or false"
		case reflect.String:
			want = "a string"
		case reflect.Struct:
			want = "an object"
		}
		return &ConfigError{Path: path, Line: line, Column: col, Key: typ.Field,
			Msg: fmt.Sprintf("got a JSON %s, want %s", typ.Value, want), Err: err}
	default:
		return &ConfigError{Path: path, Msg: "invalid JSON: " + err.Error(), Err: err}
	}
}

// keyOffsets maps each top-level key of a JSON object to the byte offset of its
// opening quote, so errors about a key's value can point at it. Best effort: the
// document has already been parsed once, so a failure just leaves keys out.
func keyOffsets(data []byte) map[string]int64 {
	out := map[string]int64{}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return out
	}
	for dec.More() {
		start := dec.InputOffset()
		t, err := dec.Token()
		if err != nil {
			return out
		}
		key, ok := t.(string)
		if !ok {
			return out
		}
		if i := bytes.IndexByte(data[start:], '"'); i >= 0 {
			out[key] = start + int64(i)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return out
		}
	}
	return out
}

// lineCol converts a byte offset into a 1-based line and column (in bytes).
func lineCol(data []byte, off int64) (line, col int) {
	off = min(off, int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

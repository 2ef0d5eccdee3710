package shapes

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// presets are the built-in shapes. Dimensions come from each model's published
// config.json (FACTS.md lists them); tiny is ours, sized to train on two CPU cores
// in seconds while still exercising GQA (4 heads, 2 kv heads) and an untied head.
var presets = map[string]Shape{
	"tiny": {
		Name: "tiny", Arch: ArchLlama, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2,
		Intermediate: 128, Vocab: 256, MaxPositions: 1024, RopeTheta: 10000, NormEps: 1e-5,
	},
	// openai-community/gpt2.
	"gpt2-124m": {
		Name: "gpt2-124m", Arch: ArchGPT2, Hidden: 768, Layers: 12, Heads: 12, KVHeads: 12,
		Intermediate: 3072, Vocab: 50257, MaxPositions: 1024, TiedEmbeddings: true, NormEps: 1e-5,
		ModelType: "gpt2",
	},
	// meta-llama/Llama-3.2-1B.
	"llama-1b": {
		Name: "llama-1b", Arch: ArchLlama, Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8,
		Intermediate: 8192, Vocab: 128256, MaxPositions: 131072, TiedEmbeddings: true,
		RopeTheta: 500000, NormEps: 1e-5, ModelType: "llama",
	},
	// meta-llama/Meta-Llama-3-8B.
	"llama3-8b": {
		Name: "llama3-8b", Arch: ArchLlama, Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 8,
		Intermediate: 14336, Vocab: 128256, MaxPositions: 8192, RopeTheta: 500000, NormEps: 1e-5,
		ModelType: "llama",
	},
	// mistralai/Mistral-7B-v0.1 (its 4096-token sliding window does not change the
	// parameter count; the sim's attention term uses the full sequence, an upper bound).
	"mistral-7b": {
		Name: "mistral-7b", Arch: ArchLlama, Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 8,
		Intermediate: 14336, Vocab: 32000, MaxPositions: 32768, RopeTheta: 10000, NormEps: 1e-5,
		ModelType: "mistral",
	},
	// codellama/CodeLlama-7b-hf.
	"codellama-7b": {
		Name: "codellama-7b", Arch: ArchLlama, Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 32,
		Intermediate: 11008, Vocab: 32016, MaxPositions: 16384, RopeTheta: 1e6, NormEps: 1e-5,
		ModelType: "llama",
	},
}

// Presets lists the built-in preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// IsPath reports whether a model value names a config.json file rather than a
// preset: it contains a path separator or ends in .json.
func IsPath(nameOrPath string) bool {
	return strings.ContainsRune(nameOrPath, '/') || strings.ContainsRune(nameOrPath, filepath.Separator) ||
		strings.HasSuffix(strings.ToLower(nameOrPath), ".json")
}

// Lookup returns the shape of a preset, or reads a Hugging Face config.json when the
// value is a path (see IsPath).
func Lookup(nameOrPath string) (Shape, error) {
	if IsPath(nameOrPath) {
		return ReadConfig(nameOrPath)
	}
	if s, ok := presets[nameOrPath]; ok {
		return s, nil
	}
	msg := fmt.Sprintf("unknown model %q", nameOrPath)
	if c := sweeps.Closest(nameOrPath, Presets()); c != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", c)
	}
	return Shape{}, fmt.Errorf("%s: presets are %s, or give the path of a Hugging Face config.json",
		msg, strings.Join(Presets(), ", "))
}

// Check reports whether Lookup would succeed, with its error.
func Check(nameOrPath string) error {
	_, err := Lookup(nameOrPath)
	return err
}

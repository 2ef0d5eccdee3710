package shapes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPresetForHFID: every preset but ours (tiny) has its Hugging Face id, in
// any case, as a local checkout's path, and as the cache's directory name; the
// id's published config.json (testdata, named after the id) has the preset's
// dimensions, so MatchPreset gives the same preset.
func TestPresetForHFID(t *testing.T) {
	tests := []struct {
		id, preset, testdata string
	}{
		{"openai-community/gpt2", "gpt2-124m", "gpt2"},
		{"meta-llama/Llama-3.2-1B", "llama-1b", "Llama-3.2-1B"},
		{"meta-llama/Meta-Llama-3-8B", "llama3-8b", "Meta-Llama-3-8B"},
		{"mistralai/Mistral-7B-v0.1", "mistral-7b", "Mistral-7B-v0.1"},
		{"codellama/CodeLlama-7b-hf", "codellama-7b", "CodeLlama-7b-hf"},
	}
	covered := map[string]bool{"tiny": true}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			org, name, _ := strings.Cut(tt.id, "/")
			for _, spelling := range []string{tt.id, strings.ToLower(tt.id), strings.ToUpper(tt.id),
				"/scratch/models/" + name, "/root/.cache/huggingface/hub/models--" + org + "--" + name} {
				got, ok := PresetForHFID(spelling)
				assert.True(t, ok, spelling)
				assert.Equal(t, tt.preset, got, spelling)
			}
			s, err := ReadConfig(filepath.Join("testdata", tt.testdata, "config.json"))
			require.NoError(t, err)
			got, ok := MatchPreset(s)
			assert.True(t, ok)
			assert.Equal(t, tt.preset, got)
			covered[tt.preset] = true
		})
	}
	assert.ElementsMatch(t, Presets(), keysOf(covered), "every preset has a Hugging Face id")
	for _, id := range []string{"", "mistralai/Mistral-7B-v0.3", "Qwen/Qwen2-0.5B", "codellama/CodeLlama-7b-Python-hf", "/"} {
		_, ok := PresetForHFID(id)
		assert.False(t, ok, "%q has no preset of its shape", id)
	}
	s, err := ReadConfig(filepath.Join("testdata", "Qwen2-0.5B", "config.json"))
	require.NoError(t, err)
	_, ok := MatchPreset(s)
	assert.False(t, ok, "Qwen2-0.5B is no preset")
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestCachedConfig finds a model's config.json in a Hugging Face hub cache laid
// out as huggingface_hub lays it out (written here): refs/main names the
// snapshot; without it, the newest snapshot with a config.json.
func TestCachedConfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HF_HOME", home)
	model := filepath.Join(home, "hub", "models--acme--Wide-3B")
	write := func(rev string, mod time.Time) string {
		p := filepath.Join(model, "snapshots", rev, "config.json")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(`{"model_type": "llama"}`), 0o644))
		require.NoError(t, os.Chtimes(p, mod, mod))
		return p
	}
	old := write("aaaa", time.Now().Add(-time.Hour))
	newer := write("bbbb", time.Now())

	got, ok := CachedConfig("acme/Wide-3B")
	require.True(t, ok)
	assert.Equal(t, newer, got, "no refs/main: the newest snapshot")

	require.NoError(t, os.MkdirAll(filepath.Join(model, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(model, "refs", "main"), []byte("aaaa\n"), 0o644))
	got, ok = CachedConfig("acme/Wide-3B")
	require.True(t, ok)
	assert.Equal(t, old, got, "refs/main names the snapshot")

	for _, id := range []string{"acme/Other", "Wide-3B", "acme/../x", "acme/a/b", ""} {
		_, ok := CachedConfig(id)
		assert.False(t, ok, id)
	}
	require.NoError(t, os.WriteFile(filepath.Join(model, "refs", "main"), []byte("../../etc\n"), 0o644))
	got, ok = CachedConfig("acme/Wide-3B")
	require.True(t, ok)
	assert.Equal(t, newer, got, "a ref that is no revision is ignored")
}

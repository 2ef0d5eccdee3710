package shapes

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// hfIDs maps Hugging Face model ids (lower case) onto the preset of the same shape.
// Only ids whose config.json gives exactly the preset's dimensions are listed:
// Llama 3.1 8B has Llama 3 8B's layers, heads, MLP and vocab (its longer context
// and RoPE scaling change no parameter or FLOP), while Mistral-7B-v0.3 (vocab
// 32768) and CodeLlama-7b-Python (vocab 32000) differ and are left out.
var hfIDs = map[string]string{
	"openai-community/gpt2": "gpt2-124m",
	"gpt2":                  "gpt2-124m",

	"meta-llama/llama-3.2-1b":          "llama-1b",
	"meta-llama/llama-3.2-1b-instruct": "llama-1b",

	"meta-llama/meta-llama-3-8b":          "llama3-8b",
	"meta-llama/meta-llama-3-8b-instruct": "llama3-8b",
	"meta-llama/llama-3.1-8b":             "llama3-8b",
	"meta-llama/llama-3.1-8b-instruct":    "llama3-8b",
	"meta-llama/meta-llama-3.1-8b":        "llama3-8b",

	"mistralai/mistral-7b-v0.1":          "mistral-7b",
	"mistralai/mistral-7b-instruct-v0.1": "mistral-7b",

	"codellama/codellama-7b-hf":          "codellama-7b",
	"codellama/codellama-7b-instruct-hf": "codellama-7b",
	"meta-llama/codellama-7b-hf":         "codellama-7b",
}

// HFIDs lists the Hugging Face model ids PresetForHFID knows, sorted, as
// "org/name=preset" (for help texts).
func HFIDs() []string {
	out := make([]string, 0, len(hfIDs))
	for id, p := range hfIDs {
		out = append(out, id+"="+p)
	}
	sort.Strings(out)
	return out
}

// PresetForHFID returns the preset of a Hugging Face model id ("mistralai/Mistral-7B-v0.1"),
// of a local checkout's path whose last element is the id's name
// ("/scratch/models/Mistral-7B-v0.1"), or of the cache's directory name
// ("models--mistralai--Mistral-7B-v0.1"). Case does not matter, as on the Hub.
func PresetForHFID(id string) (string, bool) {
	id = strings.ToLower(strings.TrimRight(strings.TrimSpace(id), "/"))
	if p, ok := hfIDs[id]; ok {
		return p, true
	}
	if rest, ok := strings.CutPrefix(filepath.Base(id), "models--"); ok {
		if p, ok := hfIDs[strings.Replace(rest, "--", "/", 1)]; ok {
			return p, true
		}
	}
	// A local path: match its last element against the ids' names, when exactly
	// one preset has an id of that name.
	base := filepath.Base(id)
	found := ""
	for k, p := range hfIDs {
		if _, name, ok := strings.Cut(k, "/"); ok && name == base {
			if found != "" && found != p {
				return "", false
			}
			found = p
		}
	}
	return found, found != ""
}

// maxSnapshots bounds the snapshot directories looked at in one cached model: a
// model has one per revision downloaded, a handful in practice.
const maxSnapshots = 64

// HFCacheDirs are the Hugging Face hub caches, in the order the hub library
// looks: $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// ~/.cache/huggingface/hub.
func HFCacheDirs() []string {
	var dirs []string
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		dirs = append(dirs, filepath.Join(d, "hub"))
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		dirs = append(dirs, filepath.Join(d, "huggingface", "hub"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".cache", "huggingface", "hub"))
	}
	return dirs
}

// CachedConfig returns the path of the config.json of Hugging Face model id
// ("org/name") in the first hub cache that holds it (HFCacheDirs): the snapshot
// refs/main names, else the most recently modified snapshot that has one. It
// reports false when no cache holds it; it reads no file's contents.
func CachedConfig(id string) (string, bool) {
	org, name, ok := strings.Cut(strings.TrimSpace(id), "/")
	if !ok || org == "" || name == "" || strings.ContainsAny(name, `/\`) || strings.Contains(id, "..") {
		return "", false
	}
	for _, cache := range HFCacheDirs() {
		model := filepath.Join(cache, "models--"+org+"--"+name)
		if ref, err := input.ReadFile(filepath.Join(model, "refs", "main"), input.Limits{What: "hub ref", MaxBytes: 256}); err == nil {
			rev := strings.TrimSpace(string(ref))
			if rev != "" && !strings.ContainsAny(rev, `/\.`) {
				p := filepath.Join(model, "snapshots", rev, "config.json")
				if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
					return p, true
				}
			}
		}
		snaps, err := readDirN(filepath.Join(model, "snapshots"), maxSnapshots)
		if err != nil {
			continue
		}
		best, bestTime := "", int64(0)
		for _, s := range snaps {
			p := filepath.Join(model, "snapshots", s.Name(), "config.json")
			st, err := os.Stat(p)
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			if t := st.ModTime().UnixNano(); best == "" || t > bestTime {
				best, bestTime = p, t
			}
		}
		if best != "" {
			return best, true
		}
	}
	return "", false
}

// readDirN reads at most n entries of a directory.
func readDirN(dir string, n int) ([]fs.DirEntry, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(n)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && len(entries) == 0 {
		return nil, err
	}
	return entries, nil
}

// MatchPreset returns the preset with the dimensions of s (architecture, widths,
// layers, heads, vocabulary, tied head and biases; GPT-2's position table too),
// so a config.json of a known model gets the preset's name and the same run IDs.
func MatchPreset(s Shape) (string, bool) {
	for _, name := range Presets() {
		p := presets[name]
		if p.Arch == s.Arch && p.Hidden == s.Hidden && p.Layers == s.Layers && p.Heads == s.Heads &&
			p.KVHeads == s.KVHeads && p.Intermediate == s.Intermediate && p.Vocab == s.Vocab &&
			p.TiedEmbeddings == s.TiedEmbeddings && p.QKVBias == s.QKVBias && p.OutBias == s.OutBias &&
			p.MLPBias == s.MLPBias && (s.Arch != ArchGPT2 || p.MaxPositions == s.MaxPositions) {
			return name, true
		}
	}
	return "", false
}

// IsPreset reports whether name is a built-in preset.
func IsPreset(name string) bool {
	_, ok := presets[name]
	return ok
}

package ingest

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// entry is one setting of a folder: a key (nested keys joined by dots), its value
// and the file it came from.
type entry struct {
	key  string
	val  any
	file string
}

// Limits of the config files read beside a run. A torchtitan job TOML or an
// accelerate config is a few kilobytes; nesting past a few levels is no such file.
var (
	tomlLimits = input.Limits{What: "TOML config", MaxBytes: 1 << 20, MaxDepth: 16}
	yamlLimits = input.Limits{What: "accelerate config", MaxBytes: 1 << 20, MaxDepth: 16, MaxValues: 20_000,
		MaxAliases: 100, MaxKeys: 1000, MaxTokens: 50_000}
)

// maxFolderEntries bounds the directory entries looked at in one run folder (a
// Trainer output_dir holds checkpoints and shards, tens of entries).
const maxFolderEntries = 4096

// maxConfigFiles bounds the TOML and YAML files read in one folder.
const maxConfigFiles = 8

// configFiles lists the TOML and YAML files of a folder, sorted.
func configFiles(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(maxFolderEntries)
	if err != nil && len(entries) == 0 && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".toml", ".yaml", ".yml":
			if e.Type().IsRegular() {
				out = append(out, e.Name())
			}
		}
	}
	sort.Strings(out)
	if len(out) > maxConfigFiles {
		return nil, fmt.Errorf("%s holds %d TOML/YAML files, more than the %d a run folder's configs take; move the others out or ingest with --set",
			dir, len(out), maxConfigFiles)
	}
	return out, nil
}

// readConfigs reads the torchtitan TOML and accelerate YAML configs of a folder.
// A YAML file that is no accelerate config (no distributed_type or fsdp_config)
// is skipped and named in skipped.
func readConfigs(dir string) (entries []entry, read, skipped []string, err error) {
	names, err := configFiles(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		var doc map[string]any
		if strings.EqualFold(filepath.Ext(name), ".toml") {
			data, err := input.ReadFile(path, tomlLimits)
			if err != nil {
				return nil, nil, nil, err
			}
			if err := checkTOMLDepth(path, data, tomlLimits.MaxDepth); err != nil {
				return nil, nil, nil, err
			}
			if doc, err = decodeTOML(path, data); err != nil {
				return nil, nil, nil, err
			}
		} else {
			data, err := input.ReadYAML(path, yamlLimits)
			if err != nil {
				return nil, nil, nil, err
			}
			if err := yaml.Unmarshal(data, &doc); err != nil {
				return nil, nil, nil, fmt.Errorf("%s: not valid YAML: %s", path, input.Clip(err.Error(), 300))
			}
			_, dt := doc["distributed_type"]
			_, fc := doc["fsdp_config"]
			if !dt && !fc {
				skipped = append(skipped, name)
				continue
			}
		}
		read = append(read, name)
		entries = append(entries, flatten("", doc, name)...)
	}
	return entries, read, skipped, nil
}

// flatten lists the keys of a nested object, joined by dots, with numbers as
// float64 (as encoding/json gives them) whatever the format's decoder gave.
// Linear in the size of what it lists: the path is one slice pushed and popped,
// joined once per leaf, and every entry appended once (building each level's key
// and list afresh was quadratic in the depth).
func flatten(prefix string, m map[string]any, file string) []entry {
	var out []entry
	var path []string
	if prefix != "" {
		path = append(path, prefix)
	}
	var walk func(m map[string]any)
	walk = func(m map[string]any) {
		for _, k := range sortedKeys(m) {
			path = append(path, k)
			if v, ok := m[k].(map[string]any); ok {
				walk(v)
			} else {
				out = append(out, entry{strings.Join(path, "."), plain(m[k]), file})
			}
			path = path[:len(path)-1]
		}
	}
	walk(m)
	return out
}

// plain turns the integer types of the TOML and YAML decoders into float64.
func plain(v any) any {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case int:
		return float64(x)
	case uint64:
		return float64(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = plain(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	}
	return v
}

// checkTOMLDepth bounds the nesting of a TOML file before the decoder, which
// recurses per level, sees it (as input.CheckJSON does for JSON): arrays and
// inline tables, and the levels of dotted keys and table headers ([a.b.c] and
// a.b.c = 1 are three levels each: a 200 KB key a.a.a... took the decoder 6 GB).
// A dotted name's levels add to the brackets around it. A run of dots between
// separators (=, comma, a bracket, a brace, a newline) is one dotted name; a
// float or a date in a value has one dot, a level more, which the limit leaves
// room for. Dots, brackets and braces inside strings and comments do not count.
func checkTOMLDepth(path string, data []byte, limit int) error {
	depth, dots, line, col := 0, 0, 1, 0
	var quote byte
	triple, comment := false, false
	tooDeep := func(what string) error {
		return &input.Error{Path: path, Line: line, Column: col,
			Msg: fmt.Sprintf("%s nest deeper than %d levels; is this a job config?", what, limit)}
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		if c == '\n' {
			line, col, comment, dots = line+1, 0, false, 0
			if quote != 0 && !triple {
				quote = 0 // an unterminated one-line string: the decoder reports it
			}
			continue
		}
		switch {
		case comment:
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
				col++
				continue
			}
			if c == quote {
				if !triple {
					quote = 0
				} else if i+2 < len(data) && data[i+1] == quote && data[i+2] == quote {
					quote, triple = 0, false
					i += 2
					col += 2
				}
			}
		case c == '#':
			comment = true
		case c == '"' || c == '\'':
			quote = c
			if i+2 < len(data) && data[i+1] == c && data[i+2] == c {
				triple = true
				i += 2
				col += 2
			}
		case c == '.':
			dots++
			if depth+dots+1 > limit+1 { // +1: the one dot of a float or a date
				return tooDeep("dotted keys and table headers")
			}
		case c == '[' || c == '{':
			depth++
			dots = 0
			if depth > limit {
				return tooDeep("arrays and tables")
			}
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
			dots = 0
		case c == '=' || c == ',':
			dots = 0
		}
	}
	return nil
}

// number reads a JSON number a folder gives, finite and within [lo, hi].
func number(m map[string]any, key string, lo, hi float64) (float64, bool, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return 0, false, nil
	}
	x, isNum := v.(float64)
	if !isNum || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false, fmt.Errorf("%s must be a number, got %s", key, show(v))
	}
	if x < lo || x > hi {
		return 0, false, fmt.Errorf("%s is %v, outside [%g, %g]", key, x, lo, hi)
	}
	return x, true, nil
}

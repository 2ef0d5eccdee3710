package input

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// FuzzCheckYAML: CheckYAML never panics, and what it accepts a YAML decoder
// decodes without blowing up (the decoder expands aliases; the bounds hold).
func FuzzCheckYAML(f *testing.F) {
	for _, s := range []string{
		"name: x\ngrid: {world_size: [1, 2]}\n",
		"rules:\n  - tokens_per_s_per_rank:-5%\n",
		aliasBomb("rules:\n"),
		"a: " + strings.Repeat("[", 5000),
		"a: " + strings.Repeat("- ", 500) + "x\n",
		"a: &a [*a]\n",
		"k: 1\n" + strings.Repeat("k: 1\n", 1500),
		"--- a\n--- b\n...\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := CheckYAML("fuzz.yaml", data, Rules); err != nil {
			return
		}
		var v any
		_ = yaml.Unmarshal(data, &v)
	})
}

// FuzzCheckJSON: CheckJSON never panics, and refuses every document nested deeper
// than the bound.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, {"b": null}]}`, strings.Repeat("[", 200), `{"loss": NaN}`, `"x"`, ``} {
		f.Add([]byte(s))
	}
	lim := Limits{What: "metrics file", MaxBytes: 1 << 20, MaxDepth: 8}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := CheckJSON("fuzz.json", data, lim); err != nil {
			return
		}
		if json.Valid(data) && jsonDepth(data) > lim.MaxDepth {
			t.Fatalf("accepted a document %d deep", jsonDepth(data))
		}
	})
}

// jsonDepth is the nesting of a valid JSON document, as encoding/json's token
// reader sees it (an implementation independent of CheckJSON's byte scan).
func jsonDepth(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	depth, deepest := 0, 0
	for {
		t, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch t {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

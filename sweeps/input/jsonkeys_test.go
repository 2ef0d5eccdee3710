package input

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckJSONDuplicateKeys: a key given twice is refused at the second one's
// line and column, naming the first; the same key in sibling objects, or a
// profiler trace (no UniqueKeys), is not.
func TestCheckJSONDuplicateKeys(t *testing.T) {
	big := func(dupAt int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 40 {
			if i > 0 {
				b.WriteString(",\n")
			}
			k := i
			if i == dupAt {
				k = 3
			}
			fmt.Fprintf(&b, "%q: %d", fmt.Sprintf("k%d", k), i)
		}
		b.WriteString("}")
		return b.String()
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"model config.json", "{\n  \"hidden_size\": 256,\n  \"n_layer\": 2,\n  \"hidden_size\": 512\n}", `x.json:4:3: the key "hidden_size" is given twice in one object (first at line 2, column 3)`},
		{"trainer_state.json", `{"global_step": 10, "global_step": -1}`, `x.json:1:21: the key "global_step" is given twice in one object (first at line 1, column 2)`},
		{"escaped spelling", `{"a": 1, "\u0061": 2}`, `x.json:1:10: the key "a" is given twice`},
		{"nested", `{"profiles": {"h100": {}, "h100": {}}}`, `x.json:1:27: the key "h100" is given twice`},
		{"large object", big(30), `x.json:31:1: the key "k3" is given twice in one object (first at line 4, column 1)`},
		{"siblings", `[{"a": 1}, {"a": 2}, {"b": {"a": 1}, "a": {"a": 2}}]`, ""},
		{"key-like values", `{"a": "a", "b": ["a", "a"], "c": {"a": "a"}}`, ""},
		{"large, no duplicate", big(-1), ""},
		{"malformed", `{"a": 1, "a`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJSON("x.json", []byte(tc.doc), Metrics)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("not an *Error: %T", err)
			}
		})
	}
	if err := CheckJSON("trace.json", []byte(`{"args": {"a": 1, "a": 2}}`), Limits{What: "profiler trace", MaxDepth: 8}); err != nil {
		t.Fatalf("a trace (no UniqueKeys) refused: %v", err)
	}
}

// TestReadJSONBOM: a file that starts with a UTF-8 byte order mark reads as
// the document after it.
func TestReadJSONBOM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trainer_state.json")
	if err := os.WriteFile(path, []byte("\ufeff{\"global_step\": 10}"), 0o666); err != nil {
		t.Fatal(err)
	}
	data, err := ReadJSON(path, Metrics)
	if err != nil || string(data) != `{"global_step": 10}` {
		t.Fatalf("got %q, %v", data, err)
	}
}

// BenchmarkCheckJSONKeys: the duplicate-key scan of a 100,000-key object and of
// a rank report's million small objects stays linear (n log n).
func BenchmarkCheckJSONKeys(b *testing.B) {
	var flat, steps strings.Builder
	flat.WriteString("{")
	for i := range 100_000 {
		if i > 0 {
			flat.WriteString(",")
		}
		fmt.Fprintf(&flat, `"key%d": %d`, i, i)
	}
	flat.WriteString("}")
	steps.WriteString(`{"steps": [`)
	for i := range 1_000_000 {
		if i > 0 {
			steps.WriteString(",")
		}
		fmt.Fprintf(&steps, `{"step": %d, "step_time_s": 0.1, "loss": 2.5}`, i)
	}
	steps.WriteString("]}")
	for _, doc := range []struct{ name, s string }{{"flat", flat.String()}, {"steps", steps.String()}} {
		b.Run(doc.name, func(b *testing.B) {
			data := []byte(doc.s)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := CheckJSON("x.json", data, Metrics); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzDuplicateKeys: on valid JSON the byte scan finds a key given twice exactly
// when encoding/json's token stream shows one.
func FuzzDuplicateKeys(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1},"b":{"b":2}}`, `[{"a":1},{"a":1}]`, `{"a\u0062":1,"ab":2}`, `{"a":"\"a\"","b":["a","a"]}`, `{"":1,"":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			_ = checkDuplicateKeys("x.json", []byte(doc)) // must not panic
			return
		}
		got := checkDuplicateKeys("x.json", []byte(doc)) != nil
		if want := hasDuplicateKey(doc); got != want {
			t.Fatalf("%q: scan says %v, tokens say %v", doc, got, want)
		}
	})
}

// hasDuplicateKey walks encoding/json's tokens, keeping each open object's keys.
func hasDuplicateKey(doc string) bool {
	dec := json.NewDecoder(strings.NewReader(doc))
	type frame struct {
		keys      map[string]bool
		expectKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top != nil && top.keys != nil {
					top.expectKey = true
				}
				stack = append(stack, &frame{keys: map[string]bool{}, expectKey: true})
				continue
			case '[':
				if top != nil && top.keys != nil {
					top.expectKey = true
				}
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if top != nil && top.keys != nil && top.expectKey {
				if top.keys[v] {
					return true
				}
				top.keys[v] = true
				top.expectKey = false
				continue
			}
		}
		if top != nil && top.keys != nil {
			top.expectKey = true
		}
	}
}

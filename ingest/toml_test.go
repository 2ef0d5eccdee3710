package ingest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeTOMLMatchesGoTOML: the linear decoder reads what go-toml's
// Unmarshal reads (dates aside, kept as written) and refuses what it refuses:
// keys and tables defined twice, tables over values, dotted keys into tables
// defined elsewhere.
func TestDecodeTOMLMatchesGoTOML(t *testing.T) {
	for _, doc := range []string{
		"a = 1\nb = 'x'\nc = \"y\\n\"\nd = 1_000\ne = 0x1F\nf = 0o17\ng = 0b101\nh = -3.5e2\ni = inf\nj = true\nk = [1, [2, 3], {x = 1}]\n",
		"[training]\nlocal_batch_size = 4\nlr = [1.5e-4, 2.5]\n[model]\nname = \"llama3\"\nflavor = \"8B\"\n",
		"[a.b.c]\nx = 1\n[a]\ny = 2\n",
		"[fruit]\napple.color = 'red'\napple.taste.sweet = true\n[fruit.apple.texture]\nsmooth = true\n",
		"[[p]]\nx = 1\n[[p]]\nx = 2\n[p.q]\ny = 3\n",
		"t = {a = 1, b.c = 2}\n",
		"\"quoted.key\" = 1\n'lit' = 2\nsite.\"google.com\" = true\n",
		"", "# only a comment\n",
		// Refused by both.
		"a = 1\na = 2\n",
		"[t]\nx = 1\n[t]\ny = 2\n",
		"a = 1\n[a]\nx = 1\n",
		"[fruit]\napple.color = 'red'\n[fruit.apple]\nx = 1\n",
		"t = {a = 1}\n[t.b]\nx = 1\n",
		"t = {a = 1}\nt.b = 2\n",
		"[a.b]\nx = 1\n[a]\nb.y = 2\n",
		"[[p]]\n[p]\n",
		"x = [1, 2\n",
		"x = 99999999999999999999\n",
		"a.b = 1\na.b.c = 2\n",
		"t = {a = 1, a = 2}\n",
	} {
		var want map[string]any
		wantErr := toml.Unmarshal([]byte(doc), &want)
		got, err := decodeTOML("job.toml", []byte(doc))
		if wantErr != nil {
			assert.Error(t, err, "go-toml refuses %q (%v)", doc, wantErr)
			if err != nil {
				assert.True(t, strings.HasPrefix(err.Error(), "job.toml:"), err.Error())
			}
			continue
		}
		require.NoError(t, err, "go-toml reads %q", doc)
		assert.Equal(t, flatten("", want, "x"), flatten("", got, "x"), "%q", doc)
	}
	// Dates are kept as written.
	got, err := decodeTOML("job.toml", []byte("when = 2026-11-27T10:00:00.123Z\nday = 2026-11-27\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"when": "2026-11-27T10:00:00.123Z", "day": "2026-11-27"}, got)
}

// TestDecodeTOMLDuplicateKeyPosition: a key given twice names its place.
func TestDecodeTOMLDuplicateKeyPosition(t *testing.T) {
	_, err := decodeTOML("job.toml", []byte("[training]\nseq_len = 128\n  seq_len = 8192\n"))
	require.Error(t, err)
	assert.Equal(t, "job.toml:3:3: not valid TOML: the key seq_len is given twice", err.Error())
}

// FuzzDecodeTOML: the linear decoder never panics, and refuses a document
// exactly when go-toml's Unmarshal does (leniency here would read a config that
// TOML itself does not allow; strictness would refuse a real one).
func FuzzDecodeTOML(f *testing.F) {
	for _, s := range []string{"a = 1\n", "[t]\nx = 1\n[t.u]\ny = [1, {a = 2}]\n", "[[p]]\nx = 1\n[[p]]\n", "a.b.c = 1\na.b.d = 2\n",
		"t = {a.b = 1}\n", "x = 1979-05-27T07:32:00Z\n", "[a]\nb.c = 1\n[a.b.d]\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if checkTOMLDepth("job.toml", []byte(doc), tomlLimits.MaxDepth) != nil {
			return
		}
		var want map[string]any
		wantErr := toml.Unmarshal([]byte(doc), &want)
		_, err := decodeTOML("job.toml", []byte(doc))
		if (wantErr == nil) != (err == nil) {
			t.Fatalf("%q: go-toml says %v, decodeTOML says %v", doc, wantErr, err)
		}
		// Both read it: the same values (dates, kept as written here, and NaN,
		// equal to nothing, aside).
		if err == nil && plainValues(want) && !strings.Contains(strings.ToLower(doc), "nan") {
			got, _ := decodeTOML("job.toml", []byte(doc))
			if !reflect.DeepEqual(flatten("", want, "x"), flatten("", got, "x")) {
				t.Fatalf("%q: go-toml reads %v, decodeTOML %v", doc, want, got)
			}
		}
	})
}

// plainValues reports whether v holds only what JSON holds (no dates).
func plainValues(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if !plainValues(e) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !plainValues(e) {
				return false
			}
		}
	case string, int64, float64, bool:
	default:
		return false
	}
	return true
}

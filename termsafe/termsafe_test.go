package termsafe

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEscapes(t *testing.T) {
	for _, tc := range []struct{ in, line, text string }{
		{"plain ascii", "plain ascii", "plain ascii"},
		{"naïve 日本 ok", "naïve 日本 ok", "naïve 日本 ok"},
		{"title \x1b]0;pwned\x07 here", `title \x1b]0;pwned\x07 here`, `title \x1b]0;pwned\x07 here`},
		{"clear\x1b[2J\x1b[H", `clear\x1b[2J\x1b[H`, `clear\x1b[2J\x1b[H`},
		{"link \x1b]8;;http://x\x1b\\y\x1b]8;;\x1b\\", `link \x1b]8;;http://x\x1b\y\x1b]8;;\x1b\`, `link \x1b]8;;http://x\x1b\y\x1b]8;;\x1b\`},
		{"c1 \u009b2J", `c1 \u009b2J`, `c1 \u009b2J`},
		{"rtl \u202eexe.txt", `rtl \u202eexe.txt`, `rtl \u202eexe.txt`},
		{"isolate \u2066x\u2069", `isolate \u2066x\u2069`, `isolate \u2066x\u2069`},
		{"two\nlines\ttab\r", `two\nlines\ttab\r`, "two\nlines\ttab\\r"},
		{"bad \xff utf8", `bad \xff utf8`, `bad \xff utf8`},
		{"del \x7f", `del \x7f`, `del \x7f`},
	} {
		assert.Equal(t, tc.line, Line(tc.in), "Line(%q)", tc.in)
		assert.Equal(t, tc.text, Text(tc.in), "Text(%q)", tc.in)
		assert.Equal(t, tc.in == tc.text, Safe(tc.in), "Safe(%q)", tc.in)
	}
}

func FuzzLineHasNoControls(f *testing.F) {
	f.Add("a\x1b[31mred\u202e\xff")
	f.Fuzz(func(t *testing.T, s string) {
		out := Line(s)
		for _, r := range out {
			if unsafe(r) {
				t.Fatalf("Line(%q) = %q keeps %U", s, out, r)
			}
		}
		if !Safe(Text(s)) {
			t.Fatalf("Text(%q) is not safe", s)
		}
	})
}

// Package termsafe makes text that came from outside fsdpbench — a run's error
// line, a script's output, a folder name — safe to print on an operator's
// terminal. Terminals act on control characters: ESC starts sequences that set
// the window title, clear the screen, write hyperlinks or remap keys; C1 controls
// do the same on some terminals; Unicode bidirectional overrides reorder what is
// shown, so a name can read as something else. Each of those is printed as a
// visible Go-style escape (\x1b, \u202e) instead, and invalid UTF-8 as \xNN;
// everything else, other scripts included, is printed as is.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Line escapes s for a single line: line breaks and tabs are escaped too.
func Line(s string) string { return escape(s, false) }

// Text escapes s but keeps line breaks and tabs, for multi-line messages.
func Text(s string) string { return escape(s, true) }

// Safe reports whether s prints as itself under Text (nothing to escape).
func Safe(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return false
			}
		}
		if r != '\n' && r != '\t' && unsafe(r) {
			return false
		}
	}
	return true
}

func escape(s string, keepLayout bool) string {
	clean := true
	for i, r := range s {
		if (r == utf8.RuneError && isInvalid(s, i)) || (unsafe(r) && !(keepLayout && (r == '\n' || r == '\t'))) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func isInvalid(s string, i int) bool {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n == 1
}

// unsafe reports whether a terminal may act on r rather than show it: C0 and C1
// controls, DEL, and the bidirectional embedding, override and isolate marks.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

package sweeps

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A spec is UTF-8 text. Bytes that are not UTF-8 used to reach the runs
// altered: goccy/go-yaml reads each as U+FFFD, and encoding/json (which the run
// ID hashes) does the same to a --set value, so env: {A: "x\xff\xfe"} and
// env: {A: "x\xfe\xff"} named one run and the second sweep was skipped as done
// (issue 37 §3). Every way in is refused instead, at the place it was written.

// checkUTF8 refuses a spec file holding bytes that are not UTF-8, at the first
// of them.
func checkUTF8(file string, data []byte) *SpecError {
	if utf8.Valid(data) {
		return nil
	}
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return &SpecError{File: file, Line: line, Column: col, Msg: fmt.Sprintf(
				"byte 0x%02x is not UTF-8; a spec is UTF-8 text (save the file as UTF-8, or write the character as a \\u escape in a double-quoted string)", data[i])}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += n
	}
	return nil
}

// badEscape reports a \u or \U escape in the double-quoted YAML scalar that
// starts at line:col of data and names no Unicode character (a surrogate
// half, or past U+10FFFF), which goccy/go-yaml reads as U+FFFD: the escape as
// written and where it is (line and column), or "" when there is none.
// goccy's token keeps no copy of the text as written (its Origin drops the
// escapes), so the scalar is read again from the file, from its opening quote
// to its closing one.
func badEscape(data []byte, line, col int) (string, int, int) {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return "", 0, 0
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(data) && data[off] != '\n'; c++ {
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	if off >= len(data) || data[off] != '"' {
		return "", 0, 0
	}
	s := data[off+1:]
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			return "", 0, 0
		case '\\':
		default:
			continue
		}
		if i+1 >= len(s) {
			return "", 0, 0
		}
		digits := map[byte]int{'u': 4, 'U': 8}[s[i+1]]
		if digits == 0 || i+2+digits > len(s) {
			i++ // \\, \" and every other escape: skip its letter
			continue
		}
		esc := string(s[i : i+2+digits])
		r, err := strconv.ParseUint(esc[2:], 16, 32)
		if err == nil && (r > utf8.MaxRune || (r >= 0xd800 && r <= 0xdfff)) {
			before := s[:i]
			if nl := bytes.LastIndexByte(before, '\n'); nl >= 0 {
				return esc, line + bytes.Count(before, []byte{'\n'}), 1 + utf8.RuneCount(before[nl+1:])
			}
			return esc, line, col + 1 + utf8.RuneCount(before)
		}
		i += 1 + digits
	}
	return "", 0, 0
}

// setNotUTF8 says where a --set flag holds a byte that is not UTF-8 (its
// 1-based byte position, as SpecError columns of flags are), or 0.
func setNotUTF8(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return i + 1
		}
		i += n
	}
	return 0
}

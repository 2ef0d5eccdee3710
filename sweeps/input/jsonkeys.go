package input

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// bom is the UTF-8 byte order mark some Windows editors put before a document.
var bom = []byte("\ufeff")

// TrimBOM drops a UTF-8 byte order mark from the start of data: it is no part of
// a JSON document (encoding/json refuses it as "invalid character 'ï'"), and the
// YAML spec reader drops it too.
func TrimBOM(data []byte) []byte { return bytes.TrimPrefix(data, bom) }

// smallObject is the number of keys up to which an object's keys are compared
// one by one as they come; a larger object's are sorted once when it closes, so
// an object of n keys costs n log n, not n².
const smallObject = 16

// jsonKey is one key of an open object: its text (decoded when the key has
// escapes, else a slice of the document) and its offset in the document.
type jsonKey struct {
	text []byte
	off  int
}

// jsonObject is an open object or array of the document being checked.
type jsonObject struct {
	object    bool
	expectKey bool // the next string is a key
	start     int  // where the object's keys begin in the shared key list
}

// checkDuplicateKeys refuses an object that gives one key twice, at the second
// key's line and column. encoding/json (and Python's json, and every JSON reader
// this tool's files pass through) keeps the last value without a word, so a
// hand-edited file with "hidden_size" twice would be read as the second without
// anyone seeing the first. Keys are compared as decoded ("a" and "\u0061" are
// one key) and with case (a map keeps "LR" and "lr" apart).
//
// It scans once, as CheckJSON's depth scan does, keeping only the keys of the
// objects open at the time; malformed JSON is left to the caller's parser.
func checkDuplicateKeys(path string, data []byte) error {
	var stack []jsonObject
	var keys []jsonKey
	dup := func(first, second int, key []byte) error {
		l1, c1 := lineCol(data, int64(first))
		l2, c2 := lineCol(data, int64(second))
		return &Error{Path: path, Line: l2, Column: c2, Msg: fmt.Sprintf(
			"the key %s is given twice in one object (first at line %d, column %d); a JSON reader keeps only the last value "+
				"without a word: give each key once, removing the one that is wrong", Quote(string(key), 60), l1, c1)}
	}
	// closeObject checks a large object's keys, sorted, and drops them.
	closeObject := func(o jsonObject) error {
		ks := keys[o.start:]
		if len(ks) > smallObject {
			sorted := ks // in place: the keys are dropped below
			slices.SortFunc(sorted, func(a, b jsonKey) int {
				if c := bytes.Compare(a.text, b.text); c != 0 {
					return c
				}
				return a.off - b.off
			})
			// Of all the keys given again, report the earliest in the file.
			first, second := -1, -1
			var key []byte
			for i := 1; i < len(sorted); i++ {
				if bytes.Equal(sorted[i].text, sorted[i-1].text) && (second < 0 || sorted[i].off < second) {
					first, second, key = sorted[i-1].off, sorted[i].off, sorted[i].text
				}
			}
			if second >= 0 {
				return dup(first, second, key)
			}
		}
		keys = keys[:o.start]
		return nil
	}
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			start, escaped := i, false
			i++
			for ; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					escaped = true
					i++
				}
			}
			if len(stack) == 0 || i >= len(data) {
				continue // an unterminated string: the caller's parser says where
			}
			top := &stack[len(stack)-1]
			if !top.object || !top.expectKey {
				continue
			}
			top.expectKey = false
			text := data[start+1 : i]
			// Decoded as encoding/json decodes it: escapes, and bytes that are not
			// UTF-8, each read as U+FFFD (so "\x81" and "\xf6" are one key to a
			// reader, and given twice: the fuzzer's find).
			if escaped || !utf8.Valid(text) {
				var s string
				if json.Unmarshal(data[start:i+1], &s) != nil {
					continue // malformed: the caller's parser says where
				}
				text = []byte(s)
			}
			own := keys[top.start:]
			if len(own) < smallObject {
				for _, k := range own {
					if bytes.Equal(k.text, text) {
						return dup(k.off, start, text)
					}
				}
			}
			keys = append(keys, jsonKey{text: text, off: start})
		case '{', '[':
			stack = append(stack, jsonObject{object: c == '{', expectKey: c == '{', start: len(keys)})
		case '}', ']':
			if len(stack) == 0 {
				continue
			}
			o := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if o.object {
				if err := closeObject(o); err != nil {
					return err
				}
			}
		case ',':
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].expectKey = true
			}
		}
	}
	// A document cut short: its open objects are checked all the same.
	for len(stack) > 0 {
		o := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if o.object {
			if err := closeObject(o); err != nil {
				return err
			}
		}
	}
	return nil
}

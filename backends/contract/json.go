package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// NonFinite is a NaN, Infinity or -Infinity that a script wrote into its JSON
// (Python's json.dump does so for non-finite floats unless told not to).
type NonFinite struct {
	// Field is where the value is: "steps[2].loss", "wall_time_s".
	Field string
	// Value is NaN, +Inf or -Inf.
	Value float64
	// Pos is "file:line:col" of the value.
	Pos string
}

// nonFiniteTokens are the bare tokens Python writes, longest first.
var nonFiniteTokens = []struct {
	text  string
	value float64
}{{"-Infinity", math.Inf(-1)}, {"Infinity", math.Inf(1)}, {"NaN", math.NaN()}}

// DecodeJSON decodes data, the content of the file (or line) named path, into v as
// encoding/json does, and also reads the bare NaN, Infinity and -Infinity that a
// Python script writes: each decodes as 0 into v and is listed, with its field
// and position, for the caller to judge (a NaN loss is a diverged run; a NaN step
// time is a broken report). Any error names path:line:col.
func DecodeJSON(path string, data []byte, v any) ([]NonFinite, error) {
	return decodeJSONAt(path, data, 0, v)
}

// decodeJSONAt is DecodeJSON for data that starts col0 bytes into the first line
// of path (a record within a stdout line): positions count in that whole line,
// while only data is read.
func decodeJSONAt(path string, data []byte, col0 int, v any) ([]NonFinite, error) {
	clean, at := maskNonFinite(data)
	if err := json.Unmarshal(clean, v); err != nil {
		return nil, fmt.Errorf("%s: %s", jsonPosAt(path, data, col0, err), jsonMessage(err))
	}
	if len(at) == 0 {
		return nil, nil
	}
	fields, err := fieldsAt(clean, at)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", jsonPosAt(path, data, col0, err), jsonMessage(err))
	}
	offs := slices.Sorted(maps.Keys(at)) // as they appear in the file
	out := make([]NonFinite, 0, len(offs))
	for _, off := range offs {
		out = append(out, NonFinite{Field: fields[off], Value: at[off], Pos: posAt(path, data, col0, off)})
	}
	return out, nil
}

// jsonValueEnd is the length of the JSON value data starts with (Python's
// non-finite tokens allowed), or len(data) when none parses: the error then
// names the whole of data.
func jsonValueEnd(data []byte) int {
	clean, _ := maskNonFinite(data)
	dec := json.NewDecoder(bytes.NewReader(clean))
	var v json.RawMessage
	if dec.Decode(&v) != nil {
		return len(data)
	}
	return int(dec.InputOffset())
}

// maskNonFinite replaces each bare non-finite token outside strings by a 0 padded
// with spaces to the token's length, so every offset (and so every error position)
// stays that of the original; it returns the offsets of the zeros and their values.
func maskNonFinite(data []byte) ([]byte, map[int]float64) {
	var out []byte
	var at map[int]float64
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			continue
		}
		if (c != 'N' && c != 'I' && c != '-') || !valueStarts(data[:i]) {
			continue
		}
		for _, tok := range nonFiniteTokens {
			if !bytes.HasPrefix(data[i:], []byte(tok.text)) || !valueEnds(data[i+len(tok.text):]) {
				continue
			}
			if out == nil {
				out = bytes.Clone(data)
				at = map[int]float64{}
			}
			out[i] = '0'
			for j := 1; j < len(tok.text); j++ {
				out[i+j] = ' '
			}
			at[i] = tok.value
			i += len(tok.text) - 1
			break
		}
	}
	if out == nil {
		return data, nil
	}
	return out, at
}

// valueStarts reports whether a value may begin after before: at the start, or
// after '[', ':' or ',' (and whitespace). Elsewhere ("10NaN") the token is no value
// and must stay, for encoding/json to refuse.
func valueStarts(before []byte) bool {
	before = bytes.TrimRight(before, " \t\r\n")
	return len(before) == 0 || bytes.IndexByte([]byte("[:,"), before[len(before)-1]) >= 0
}

// valueEnds reports whether a value may end before after ("NaNa" is no NaN).
func valueEnds(after []byte) bool {
	return len(after) == 0 || bytes.IndexByte([]byte(" \t\r\n,]}"), after[0]) >= 0
}

// fieldsAt walks the (valid) JSON in data and names the field of the value at
// each offset of at: "steps[2].loss", or "." for the top-level value.
func fieldsAt(data []byte, at map[int]float64) (map[int]string, error) {
	type frame struct {
		object bool
		key    string
		index  int
		// wantKey: inside an object, the next string token is a key.
		wantKey bool
	}
	var stack []frame
	name := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		if b.Len() == 0 {
			return "."
		}
		return b.String()
	}
	// afterValue moves the enclosing container past one value.
	afterValue := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	out := map[int]string{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{object: true, wantKey: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
				afterValue()
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				stack[n-1].key, stack[n-1].wantKey = t, false
				continue
			}
			afterValue()
		default:
			if t, ok := tok.(json.Number); ok && t == "0" {
				// The token's first byte follows the separators after start.
				off := int(start) + len(data[start:]) - len(bytes.TrimLeft(data[start:], " \t\r\n,:"))
				if _, masked := at[off]; masked {
					out[off] = name()
				}
			}
			afterValue()
		}
	}
}

// posAt is path:line:col of the byte at off.
func posAt(path string, data []byte, col0, off int) string {
	off = min(max(off, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	if line == 1 {
		col += col0
	}
	return fmt.Sprintf("%s:%d:%d", path, line, col)
}

// jsonMessage is a JSON error without encoding/json's "json: " prefix, with the
// field of a type error named as the file has it.
func jsonMessage(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "the value"
		}
		return fmt.Sprintf("%s must be %s, got a JSON %s", field, goTypeName(te.Type.Kind().String()), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// goTypeName says a Go kind as a JSON value.
func goTypeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "a whole number"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice", kind == "array":
		return "a list"
	case kind == "map", kind == "struct":
		return "an object"
	}
	return "a " + kind
}

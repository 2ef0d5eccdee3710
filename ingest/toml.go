package ingest

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// decodeTOML decodes a TOML document into nested maps, as toml.Unmarshal into
// a map[string]any does (tables as maps, arrays and arrays of tables as []any,
// integers as int64), in time linear in the document. go-toml's decoder checks
// each key against every key seen before it (internal/tracker's linear find),
// so a 1 MiB job.toml of 115,000 flat keys took 36 s of CPU; here each table
// keeps its keys in a map. Dates and times are kept as written (strings): no
// axis is a date. The document's depth is bounded before (checkTOMLDepth), so
// the recursion here is too.
//
// The rules of TOML that a decoder enforces beyond syntax are enforced here: a
// key or a table defined twice, a table header over a key or an inline table,
// dotted keys that extend a table defined elsewhere.
func decodeTOML(path string, data []byte) (map[string]any, error) {
	d := tomlDecoder{path: path}
	d.p.Reset(data)
	root := newTOMLTable(tomlImplicit)
	cur := root
	for d.p.NextExpression() {
		e := d.p.Expression()
		var err error
		switch e.Kind {
		case unstable.KeyValue:
			err = d.keyValue(cur, e)
		case unstable.Table:
			cur, err = d.header(root, e, false)
		case unstable.ArrayTable:
			cur, err = d.header(root, e, true)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := d.p.Error(); err != nil {
		var pe *unstable.ParserError
		if errors.As(err, &pe) && pe.Highlight != nil {
			pos := d.p.Shape(d.p.Range(pe.Highlight)).Start
			return nil, fmt.Errorf("%s:%d:%d: not valid TOML: %s", path, pos.Line, pos.Column, pe.Message)
		}
		return nil, fmt.Errorf("%s: not valid TOML: %w", path, err)
	}
	return root.plain(), nil
}

// tomlKind says how a table came to be, which decides what may extend it.
type tomlKind int

const (
	tomlImplicit  tomlKind = iota // named by a longer header ([a.b] makes a)
	tomlHeader                    // defined by its own [header]
	tomlDotted                    // made by a dotted key (a.b = 1 makes a)
	tomlInline                    // an inline table {...}: closed
	tomlArrayElem                 // an element of an array of tables [[a]]
)

// tomlTable is a table being built. Values are scalars, []any (arrays),
// *tomlTable and *tomlArray (arrays of tables).
type tomlTable struct {
	kind tomlKind
	keys map[string]any
}

// tomlArray is an array of tables ([[name]]).
type tomlArray struct{ elems []*tomlTable }

func newTOMLTable(k tomlKind) *tomlTable { return &tomlTable{kind: k, keys: map[string]any{}} }

// plain converts the table into what toml.Unmarshal gives.
func (t *tomlTable) plain() map[string]any {
	out := make(map[string]any, len(t.keys))
	for k, v := range t.keys {
		out[k] = plainTOML(v)
	}
	return out
}

func plainTOML(v any) any {
	switch x := v.(type) {
	case *tomlTable:
		return x.plain()
	case *tomlArray:
		out := make([]any, len(x.elems))
		for i, e := range x.elems {
			out[i] = e.plain()
		}
		return out
	case []any: // an array may hold inline tables
		for i := range x {
			x[i] = plainTOML(x[i])
		}
		return x
	}
	return v
}

type tomlDecoder struct {
	path string
	p    unstable.Parser
}

// errAt is a decoding error at node n.
func (d *tomlDecoder) errAt(n *unstable.Node, format string, args ...any) error {
	pos := d.p.Shape(n.Raw).Start
	return fmt.Errorf("%s:%d:%d: not valid TOML: %s", d.path, pos.Line, pos.Column, fmt.Sprintf(format, args...))
}

// keyParts lists a key's parts and the node of each.
func keyParts(it unstable.Iterator) (parts []string, nodes []*unstable.Node) {
	for it.Next() {
		n := it.Node()
		parts = append(parts, string(n.Data))
		nodes = append(nodes, n)
	}
	return parts, nodes
}

// header handles [a.b.c] (array false) and [[a.b.c]] (array true): it returns
// the table the following keys go into.
func (d *tomlDecoder) header(root *tomlTable, e *unstable.Node, array bool) (*tomlTable, error) {
	parts, nodes := keyParts(e.Key())
	t := root
	for i, name := range parts[:len(parts)-1] {
		switch v := t.keys[name].(type) {
		case nil:
			nt := newTOMLTable(tomlImplicit)
			t.keys[name] = nt
			t = nt
		case *tomlTable:
			if v.kind == tomlInline {
				return nil, d.errAt(nodes[i], "%s is an inline table, which a header cannot extend", strings.Join(parts[:i+1], "."))
			}
			t = v
		case *tomlArray:
			t = v.elems[len(v.elems)-1]
		default:
			return nil, d.errAt(nodes[i], "%s is a value, not a table", strings.Join(parts[:i+1], "."))
		}
	}
	last, node := parts[len(parts)-1], nodes[len(nodes)-1]
	name := strings.Join(parts, ".")
	switch v := t.keys[last].(type) {
	case nil:
		nt := newTOMLTable(tomlHeader)
		if array {
			nt.kind = tomlArrayElem
			t.keys[last] = &tomlArray{elems: []*tomlTable{nt}}
		} else {
			t.keys[last] = nt
		}
		return nt, nil
	case *tomlTable:
		if !array && v.kind == tomlImplicit {
			v.kind = tomlHeader
			return v, nil
		}
		return nil, d.errAt(node, "the table %s is defined twice", name)
	case *tomlArray:
		if array {
			nt := newTOMLTable(tomlArrayElem)
			v.elems = append(v.elems, nt)
			return nt, nil
		}
		return nil, d.errAt(node, "%s is an array of tables ([[%s]]), not a table", name, name)
	default:
		return nil, d.errAt(node, "%s is given twice: as a value, then as a table", name)
	}
}

// keyValue sets a = v or a.b.c = v in t; a dotted key may extend only the
// tables that dotted keys made.
func (d *tomlDecoder) keyValue(t *tomlTable, e *unstable.Node) error {
	parts, nodes := keyParts(e.Key())
	for i, name := range parts[:len(parts)-1] {
		switch v := t.keys[name].(type) {
		case nil:
			nt := newTOMLTable(tomlDotted)
			t.keys[name] = nt
			t = nt
		case *tomlTable:
			if v.kind != tomlDotted {
				return d.errAt(nodes[i], "%s is a table defined elsewhere; a dotted key cannot add to it", strings.Join(parts[:i+1], "."))
			}
			t = v
		default:
			return d.errAt(nodes[i], "%s is a value, not a table", strings.Join(parts[:i+1], "."))
		}
	}
	last := parts[len(parts)-1]
	if _, ok := t.keys[last]; ok {
		return d.errAt(nodes[len(nodes)-1], "the key %s is given twice", strings.Join(parts, "."))
	}
	v, err := d.value(e.Value())
	if err != nil {
		return err
	}
	t.keys[last] = v
	return nil
}

// value converts a value node.
func (d *tomlDecoder) value(n *unstable.Node) (any, error) {
	switch n.Kind {
	case unstable.String:
		return string(n.Data), nil
	case unstable.Bool:
		return string(n.Data) == "true", nil
	case unstable.Integer:
		s := strings.ReplaceAll(string(n.Data), "_", "")
		base := 10
		if len(s) > 2 && s[0] == '0' && strings.ContainsRune("xob", rune(s[1])) {
			base = map[byte]int{'x': 16, 'o': 8, 'b': 2}[s[1]]
			s = s[2:]
		}
		i, err := strconv.ParseInt(s, base, 64)
		if err != nil {
			return nil, d.errAt(n, "the integer %s does not fit 64 bits", string(n.Data))
		}
		return i, nil
	case unstable.Float:
		s := strings.ReplaceAll(string(n.Data), "_", "")
		switch strings.TrimLeft(s, "+-") {
		case "inf":
			if strings.HasPrefix(s, "-") {
				return math.Inf(-1), nil
			}
			return math.Inf(1), nil
		case "nan":
			return math.NaN(), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil { // past float64 too (1e1000), as go-toml refuses it
			return nil, d.errAt(n, "cannot read the float %s: %v", string(n.Data), errors.Unwrap(err))
		}
		return f, nil
	case unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
		// The parser checks a date's shape, not its fields (month 13, day 0):
		// go-toml's decoder does, on a one-key document (no quadratic cost).
		var m map[string]any
		if err := toml.Unmarshal(append([]byte("v = "), n.Data...), &m); err != nil {
			return nil, d.errAt(n, "%s", strings.TrimPrefix(err.Error(), "toml: "))
		}
		return string(n.Data), nil
	case unstable.Array:
		out := []any{}
		for it := n.Children(); it.Next(); {
			v, err := d.value(it.Node())
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case unstable.InlineTable:
		t := newTOMLTable(tomlDotted) // its own dotted keys may extend it
		for it := n.Children(); it.Next(); {
			if err := d.keyValue(t, it.Node()); err != nil {
				return nil, err
			}
		}
		t.kind = tomlInline
		return t, nil
	}
	return nil, d.errAt(n, "unexpected %s", n.Kind)
}

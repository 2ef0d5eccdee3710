package sweeps

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// node is a YAML value with the position it came from. The spec is read into this
// small tree (rather than decoded into structs) so every value keeps its position
// for error messages, --set can edit it, and the resolved spec is written from it.
type node struct {
	pos  pos
	kind nodeKind
	// val is the scalar's value: int64, float64, bool or string (nil for null).
	val any
	// text is a number as written (2048.0, 1e12), for messages.
	text    string
	items   []*node  // sequence
	entries []*entry // mapping, in the order written
	// size counts the values below and including this one, aliases expanded; it
	// bounds the work an alias bomb could cause.
	size int
}

type nodeKind uint8

const (
	nullNode nodeKind = iota
	scalarNode
	seqNode
	mapNode
)

type entry struct {
	key    string
	keyPos pos
	val    *node
}

// get returns the entry with the given key, or nil.
func (n *node) get(key string) *entry {
	for _, e := range n.entries {
		if e.key == key {
			return e
		}
	}
	return nil
}

// set replaces the value of key, or appends the entry. It never writes into the
// existing entries (an alias may share them).
func (n *node) set(key string, keyPos pos, v *node) {
	out := make([]*entry, 0, len(n.entries)+1)
	found := false
	for _, e := range n.entries {
		if e.key == key {
			e = &entry{key: key, keyPos: e.keyPos, val: v}
			found = true
		}
		out = append(out, e)
	}
	if !found {
		out = append(out, &entry{key: key, keyPos: keyPos, val: v})
	}
	n.entries = out
}

// ownMap returns n's mapping under key as a copy that n alone holds (so editing it
// leaves aliases of the original alone), creating an empty one if absent or not a
// mapping.
func (n *node) ownMap(key string, p pos) *node {
	m := &node{pos: p, kind: mapNode}
	if e := n.get(key); e != nil {
		if e.val.kind == mapNode {
			m = &node{pos: e.val.pos, kind: mapNode, entries: e.val.entries}
		}
		p = e.keyPos
	}
	n.set(key, p, m)
	return m
}

// remove deletes key (if present).
func (n *node) remove(key string) {
	for i, e := range n.entries {
		if e.key == key {
			n.entries = append(n.entries[:i:i], n.entries[i+1:]...)
			return
		}
	}
}

// describe names the node's type and value for "expected X, got Y" messages.
func (n *node) describe() string {
	switch n.kind {
	case nullNode:
		return "nothing (null)"
	case seqNode:
		return "a list"
	case mapNode:
		return "a mapping"
	}
	switch v := n.val.(type) {
	case string:
		return "the string " + q(v)
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	case float64:
		if n.text != "" {
			return "the number " + clip(n.text)
		}
		return "the number " + strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// written renders a scalar as the spec wrote it, for "got X" in messages.
func (n *node) written() string {
	if n.text != "" {
		return clip(n.text)
	}
	if i, ok := n.val.(int64); ok {
		return strconv.FormatInt(i, 10)
	}
	return n.describe()
}

// quoteMax bounds how much of a value from the spec a message repeats: a
// hostile or binary file must not fill the terminal.
const quoteMax = 64

// q quotes text from the spec for a message: escaped, and cut to quoteMax
// characters.
func q(s string) string { return input.Quote(s, quoteMax) }

// clip is q without the quotes, for numbers as written.
func clip(s string) string { return input.Clip(s, quoteMax) }

// quoted renders a scalar as written in messages: strings in quotes.
func quoted(n *node) string {
	if s, ok := n.val.(string); ok && n.kind == scalarNode {
		return q(s)
	}
	return n.describe()
}

// toAny converts the tree to plain Go values (map[string]any, []any, int64, ...),
// for backend_options and launcher_options.
func (n *node) toAny() any {
	switch n.kind {
	case seqNode:
		out := make([]any, len(n.items))
		for i, it := range n.items {
			out[i] = it.toAny()
		}
		return out
	case mapNode:
		out := make(map[string]any, len(n.entries))
		for _, e := range n.entries {
			out[e.key] = e.val.toAny()
		}
		return out
	}
	return n.val
}

// toYAML converts the tree to values goccy/go-yaml marshals in order.
func (n *node) toYAML() any {
	switch n.kind {
	case scalarNode:
		if n.text != "" {
			// A number as written: env values keep the spec's text (envString:
			// `000` is "000", `2048.0` is "2048.0"), so the resolved spec must
			// write the text, not the number's canonical form, to read back
			// the same (the fuzzer found env.A: [000] resolved to [0]).
			return writtenScalar(n.text)
		}
	case seqNode:
		out := make([]any, len(n.items))
		for i, it := range n.items {
			out[i] = it.toYAML()
		}
		return out
	case mapNode:
		out := make(yaml.MapSlice, len(n.entries))
		for i, e := range n.entries {
			out[i] = yaml.MapItem{Key: e.key, Value: e.val.toYAML()}
		}
		return out
	}
	return n.val
}

// writtenScalar is a scalar's text as the spec wrote it, which the YAML encoder
// writes as it is (goccy parses MarshalYAML's bytes into the node it writes).
type writtenScalar string

// MarshalYAML implements goccy/go-yaml's BytesMarshaler.
func (w writtenScalar) MarshalYAML() ([]byte, error) { return []byte(w), nil }

// parseYAML reads one YAML document into a tree. Malformed YAML is reported with
// goccy's message and position; duplicate keys, unsupported tags and non-string keys
// with ours.
func parseYAML(data []byte, file string, e *errs) *node {
	f, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		e.add(yamlError(file, err))
		return nil
	}
	var docs []*ast.DocumentNode
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		e.at(pos{file: file, line: 1, col: 1}, "the spec is empty; it needs at least `name:` (see sweeps/examples/quickstart.yaml)")
		return nil
	}
	if len(docs) > 1 {
		p := tokenPos(file, docs[1].Body)
		e.at(p, "a spec holds one YAML document, but a second starts here; put each sweep in its own file")
		return nil
	}
	c := converter{file: file, data: data, e: e, anchors: map[string]*node{}}
	return c.convert(docs[0].Body, 0)
}

// yamlError turns a goccy error into a SpecError at its position.
func yamlError(file string, err error) *SpecError {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		tk := ye.GetToken()
		msg := ye.GetMessage()
		if strings.Contains(msg, "character '\t'") {
			// goccy quotes the tab itself, which printed as an invisible or
			// replaced character.
			msg = "a tab, which YAML does not allow for indentation; indent with spaces"
		}
		return &SpecError{File: file, Line: tk.Position.Line, Column: tk.Position.Column,
			Msg: "malformed YAML: " + clipMessage(msg), Err: err}
	}
	return &SpecError{File: file, Line: 1, Column: 1, Msg: "malformed YAML: " + clipMessage(err.Error()), Err: err}
}

// yamlFloat is YAML 1.2's core schema float (without .inf and .nan).
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// clipMessage bounds a parser's message, which can quote the input: valid UTF-8,
// no control characters, at most a few lines' worth.
func clipMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, msg)
	if r := []rune(msg); len(r) > 4*quoteMax {
		msg = string(r[:4*quoteMax]) + "…"
	}
	return msg
}

func tokenPos(file string, n ast.Node) pos {
	if n == nil || n.GetToken() == nil {
		return pos{file: file, line: 1, col: 1}
	}
	tp := n.GetToken().Position
	return pos{file: file, line: tp.Line, col: tp.Column}
}

// badEscape is badEscape for a double-quoted scalar that goccy read as
// holding U+FFFD (the one place a bad escape can be).
func (c *converter) badEscape(v *ast.StringNode, p pos) (string, pos) {
	if v.Token == nil || v.Token.Type != token.DoubleQuoteType || !strings.ContainsRune(v.Value, utf8.RuneError) {
		return "", p
	}
	esc, line, col := badEscape(c.data, p.line, p.col)
	return esc, pos{file: p.file, line: line, col: col}
}

// maxDepth bounds nesting, so a hostile or broken file cannot exhaust the stack;
// maxSize bounds the number of values once aliases are expanded.
const (
	maxDepth = 64
	maxSize  = 1 << 20
)

type converter struct {
	file     string
	data     []byte // the spec, for badEscape
	e        *errs
	anchors  map[string]*node
	tooLarge bool
}

func (c *converter) convert(n ast.Node, depth int) *node {
	out := c.convertNode(n, depth)
	if out.size == 0 {
		out.size = 1
		for _, it := range out.items {
			out.size += it.size
		}
		for _, e := range out.entries {
			out.size += e.val.size
		}
	}
	if out.size > maxSize && !c.tooLarge {
		c.tooLarge = true
		c.e.at(out.pos, "the spec expands to more than %d values (aliases included); it cannot be a sweep spec", maxSize)
	}
	if c.tooLarge {
		return &node{pos: out.pos, size: 1}
	}
	return out
}

func (c *converter) convertNode(n ast.Node, depth int) *node {
	p := tokenPos(c.file, n)
	if depth > maxDepth {
		c.e.at(p, "the spec nests deeper than %d levels", maxDepth)
		return &node{pos: p}
	}
	switch v := n.(type) {
	case nil:
		return &node{pos: p}
	case *ast.NullNode:
		return &node{pos: p}
	case *ast.BoolNode:
		return &node{pos: p, kind: scalarNode, val: v.Value}
	case *ast.IntegerNode:
		switch i := v.Value.(type) {
		case int64:
			return &node{pos: p, kind: scalarNode, val: i, text: v.Token.Value}
		case uint64:
			if i > math.MaxInt64 {
				c.e.at(p, "the number %d is too large", i)
				return &node{pos: p}
			}
			return &node{pos: p, kind: scalarNode, val: int64(i), text: v.Token.Value}
		}
		c.e.at(p, "cannot read the number %s", q(v.Token.Value))
		return &node{pos: p}
	case *ast.FloatNode:
		return &node{pos: p, kind: scalarNode, val: v.Value, text: v.Token.Value}
	case *ast.InfinityNode:
		return &node{pos: p, kind: scalarNode, val: v.Value, text: v.Token.Value}
	case *ast.NanNode:
		return &node{pos: p, kind: scalarNode, val: math.NaN(), text: v.Token.Value}
	case *ast.StringNode:
		if esc, at := c.badEscape(v, p); esc != "" {
			c.e.at(at, "the escape %s names no Unicode character (a surrogate half, or past \\U0010FFFF); a spec's strings are UTF-8 text", esc)
			return &node{pos: p}
		}
		if v.Token != nil && v.Token.Type == token.StringType && yamlFloat.MatchString(v.Value) {
			// YAML 1.2's core schema reads 1e3 as a float; goccy/go-yaml reads it as
			// a string. Follow the schema, as --set does, so `steps: 1e3` means the
			// same in the file and on the command line.
			if f, err := strconv.ParseFloat(v.Value, 64); err == nil || errors.Is(err, strconv.ErrRange) {
				return &node{pos: p, kind: scalarNode, val: f, text: v.Value}
			}
		}
		return &node{pos: p, kind: scalarNode, val: v.Value}
	case *ast.LiteralNode:
		if v.Value == nil {
			return &node{pos: p, kind: scalarNode, val: ""}
		}
		return &node{pos: p, kind: scalarNode, val: v.Value.Value}
	case *ast.TagNode:
		return c.tagged(v, p, depth)
	case *ast.AnchorNode:
		val := c.convert(v.Value, depth+1)
		if v.Name != nil {
			c.anchors[v.Name.GetToken().Value] = val
		}
		return val
	case *ast.AliasNode:
		name := ""
		if v.Value != nil {
			name = v.Value.GetToken().Value
		}
		if a, ok := c.anchors[name]; ok {
			return a
		}
		c.e.at(p, "alias *%s refers to no anchor defined before it (define it with &%s)", name, name)
		return &node{pos: p}
	case *ast.SequenceNode:
		out := &node{pos: p, kind: seqNode, items: make([]*node, 0, len(v.Values))}
		for _, it := range v.Values {
			out.items = append(out.items, c.convert(it, depth+1))
		}
		return out
	case *ast.MappingNode:
		out := &node{pos: p, kind: mapNode}
		if len(v.Values) > 0 && !v.IsFlowStyle {
			out.pos = tokenPos(c.file, v.Values[0].Key)
		}
		c.mapping(out, v.Values, depth)
		return out
	case *ast.MappingValueNode:
		out := &node{pos: tokenPos(c.file, v.Key), kind: mapNode}
		c.mapping(out, []*ast.MappingValueNode{v}, depth)
		return out
	default:
		c.e.at(p, "unsupported YAML construct (%s)", n.Type())
		return &node{pos: p}
	}
}

// mapping fills out with the entries of a YAML mapping. Merge keys (`<<: *anchor`)
// copy the anchored mapping's entries; keys written in the mapping itself win.
func (c *converter) mapping(out *node, values []*ast.MappingValueNode, depth int) {
	seen := map[string]pos{}
	var merged []*entry
	for _, mv := range values {
		if mv == nil {
			continue
		}
		kp := tokenPos(c.file, mv.Key)
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			m := c.convert(mv.Value, depth+1)
			switch m.kind {
			case mapNode:
				merged = append(merged, m.entries...)
			case seqNode:
				for _, it := range m.items {
					if it.kind == mapNode {
						merged = append(merged, it.entries...)
					} else {
						c.e.at(it.pos, "a merge key (<<) takes a mapping or a list of mappings, got %s", it.describe())
					}
				}
			default:
				c.e.at(m.pos, "a merge key (<<) takes a mapping or a list of mappings, got %s", m.describe())
			}
			continue
		}
		k := c.convert(mv.Key, depth+1)
		key, ok := k.val.(string)
		if k.kind != scalarNode || !ok {
			c.e.at(kp, "a key must be a name, got %s", k.describe())
			continue
		}
		if first, dup := seen[key]; dup {
			c.e.at(kp, "duplicate key %s (first at %s); keep one of them", q(key), first)
			continue
		}
		seen[key] = kp
		out.entries = append(out.entries, &entry{key: key, keyPos: kp, val: c.convert(mv.Value, depth+1)})
	}
	for _, m := range merged {
		if _, ok := seen[m.key]; !ok {
			seen[m.key] = m.keyPos
			out.entries = append(out.entries, m)
		}
	}
}

// tagged handles explicit tags: the standard scalar tags convert the value, others
// are refused (a spec has no use for custom types).
func (c *converter) tagged(v *ast.TagNode, p pos, depth int) *node {
	tag := v.Start.Value
	inner := c.convert(v.Value, depth+1)
	text := ""
	if v.Value != nil && v.Value.GetToken() != nil {
		text = v.Value.GetToken().Value
	}
	switch tag {
	case "!!str":
		if inner.kind == scalarNode || inner.kind == nullNode {
			return &node{pos: inner.pos, kind: scalarNode, val: text}
		}
	case "!!int":
		if i, err := strconv.ParseInt(text, 0, 64); err == nil {
			return &node{pos: inner.pos, kind: scalarNode, val: i}
		}
		c.e.at(inner.pos, "!!int %s is not an integer", q(text))
		return inner
	case "!!float":
		if f, err := strconv.ParseFloat(text, 64); err == nil {
			return &node{pos: inner.pos, kind: scalarNode, val: f}
		}
		c.e.at(inner.pos, "!!float %s is not a number", q(text))
		return inner
	case "!!bool", "!!null", "!!map", "!!seq":
		return inner
	}
	c.e.at(p, "unsupported tag %s (a spec uses plain values; remove the tag)", tag)
	return inner
}

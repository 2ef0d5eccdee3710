package sweeps

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// resolvedYAML writes the spec as it will run: the tree after --set, with every
// top-level setting written out (defaults included), keys in TopLevelKeys order.
func resolvedYAML(root *node, file string, sets []string) ([]byte, error) {
	d := Defaults()
	defaults := map[string]any{
		"backend": d.Backend, "launcher": d.Launcher, "hardware": d.Hardware, "model": d.Model,
		"seq_len": int64(d.SeqLen), "steps": int64(d.Steps), "warmup_steps": int64(d.WarmupSteps),
		"repeats": int64(d.Repeats), "timeout": "30m", "seed": d.Seed,
	}
	given := func(section, k string) bool {
		e := root.get(section)
		return e != nil && e.val.kind == mapNode && e.val.get(k) != nil
	}
	var out yaml.MapSlice
	for _, k := range TopLevelKeys {
		if e := root.get(k); e != nil {
			out = append(out, yaml.MapItem{Key: k, Value: e.val.toYAML()})
			continue
		}
		if given(keyBase, k) || given(keyGrid, k) {
			continue
		}
		if v, ok := defaults[k]; ok {
			out = append(out, yaml.MapItem{Key: k, Value: v})
		}
	}
	n, err := yaml.ValueToNode(out, yaml.IndentSequence(true))
	if err != nil {
		return nil, err
	}
	flowLeaves(n, false)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# The sweep spec as run (resolved from %s", file)
	if len(sets) > 0 {
		b.WriteString(" with")
		for _, s := range sets {
			fmt.Fprintf(&b, " --set %q", s)
		}
	}
	b.WriteString(").\n")
	b.WriteString(strings.TrimRight(n.String(), "\n"))
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// flowLeaves writes lists of scalars, and mappings of scalars inside lists, in flow
// style ([a, b], {k: v}), as people write grid axes and exclude entries.
func flowLeaves(n ast.Node, inSeq bool) {
	switch v := n.(type) {
	case *ast.MappingNode:
		leaves := true
		for _, mv := range v.Values {
			leaves = leaves && isLeaf(mv.Key) && isLeaf(mv.Value)
			flowLeaves(mv.Value, false)
		}
		if inSeq && leaves {
			v.SetIsFlowStyle(true)
		}
	case *ast.MappingValueNode:
		flowLeaves(v.Value, false)
		if inSeq && isLeaf(v.Key) && isLeaf(v.Value) {
			v.SetIsFlowStyle(true)
		}
	case *ast.SequenceNode:
		leaves := true
		for _, it := range v.Values {
			leaves = leaves && isLeaf(it)
			flowLeaves(it, true)
		}
		if leaves {
			v.SetIsFlowStyle(true)
		}
	}
}

// isLeaf says whether n is a scalar that reads back the same inside a flow
// collection (as a value or a key). A plain string holding a flow indicator (`,[]{}`), a `:` or `#`, or
// a line break would not: goccy writes it bare (or as a literal block), which is
// right in block style but splits or breaks the flow list, so its collection stays
// in block style.
func isLeaf(n ast.Node) bool {
	switch v := n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode:
		return false
	case *ast.StringNode:
		if v.Token != nil && (v.Token.Type == token.DoubleQuoteType || v.Token.Type == token.SingleQuoteType) {
			return true
		}
		return !strings.ContainsAny(v.Value, ",[]{}:#\n\r")
	}
	return true
}

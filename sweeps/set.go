package sweeps

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// setFile is SpecError.File for problems in --set flags.
const setFile = "--set"

// applySets edits the spec tree with opts.Set, in order. Values keep their position
// in the flag, so a bad value is reported as --set:<flag>:<column>. It returns the
// flags applied, for the resolved spec's header.
func (p *parsing) applySets(root *node) []string {
	var applied []string
	for i, s := range p.opts.Set {
		flag := i + 1
		at := func(col int) pos { return pos{file: setFile, line: flag, col: col} }
		if col := setNotUTF8(s); col > 0 {
			p.e.at(at(col), "byte 0x%02x is not UTF-8; a --set flag is UTF-8 text", s[col-1])
			continue
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 || strings.TrimSpace(s[:eq]) == "" {
			p.e.at(at(1), "--set %s: expected key=value, e.g. --set sharding=full_shard,no_shard or --set seq_len=1024", q(s))
			continue
		}
		key := strings.TrimSpace(s[:eq])
		keyAt := at(1 + strings.Index(s, key))
		if _, known := keyByName[key]; known && strings.HasPrefix(strings.TrimSpace(s[eq+1:]), "{") {
			// A flag's value is split at commas into a list: a mapping would
			// be read as a list of its pieces, and refused as one.
			p.e.at(at(eq+2+strings.Index(s[eq+1:], "{")), "%s", setMappingMsg(key))
			continue
		}
		val, ok := p.setValue(s[eq+1:], eq+2, at)
		if !ok {
			continue
		}
		bracketed := strings.HasPrefix(strings.TrimSpace(s[eq+1:]), "[")
		if p.applyDynSet(root, key, keyAt, val, bracketed) || p.applySet(root, key, keyAt, val) {
			applied = append(applied, s)
		}
	}
	return applied
}

// setMappingMsg says that --set takes no mapping, and what to give instead:
// for repeats, whose mapping {min, max, ci} is a form of its own, the auto
// form --set does take.
func setMappingMsg(key string) string {
	if key == "repeats" {
		return fmt.Sprintf("--set cannot take the repeats mapping {min, max, ci}: a --set value is one value or a comma-separated list. Give --set repeats=auto (until the 95%% interval of the median is within ±%g%%, %d to %d repeats) or --set repeats=N, or write repeats: {min: %d, max: %d, ci: 2%%} in the spec",
			100*AutoRepeatsCI, AutoRepeatsMin, AutoRepeatsMax, AutoRepeatsMin, AutoRepeatsMax)
	}
	return fmt.Sprintf("--set cannot take a mapping: a --set value is one value or a comma-separated list; write %s: {...} in the spec", key)
}

// applySet applies one key=value to the tree; false if the key is refused.
func (p *parsing) applySet(root *node, key string, keyAt pos, val *node) bool {
	path := strings.Split(key, ".")
	if path[0] == keyBackendOptions || path[0] == keyLauncherOptions {
		if len(path) < 2 || strings.Contains(key, "..") || path[len(path)-1] == "" {
			p.e.at(keyAt, "set one option at a time: --set %s.NAME=VALUE", path[0])
			return false
		}
		m := root.ownMap(path[0], keyAt)
		for _, seg := range path[1 : len(path)-1] {
			m = m.ownMap(seg, keyAt)
		}
		m.set(path[len(path)-1], keyAt, val)
		return true
	}
	d, known := keyByName[key]
	switch {
	case len(path) > 1:
		p.e.at(keyAt, "unknown key %s: only backend_options.NAME and launcher_options.NAME take a dotted path", q(key))
		return false
	case !known:
		switch key {
		case keyBase, keyGrid, keyExclude, keyInclude, keySearch:
			p.e.at(keyAt, "%s cannot be set with --set; set an axis instead (--set sharding=full_shard,no_shard makes a grid axis, --set seq_len=1024 one value for every run) or edit the spec", key)
		default:
			cands := append(append([]string{}, TopLevelKeys...), Axes...)
			p.e.at(keyAt, "unknown key %s (allowed: the axes %s, and the settings name, backend, launcher, steps, warmup_steps, repeats, timeout, backend_options.NAME, launcher_options.NAME%s)",
				q(key), strings.Join(Axes, ", "), didYouMean(key, cands))
		}
		return false
	}
	list := val.kind == seqNode
	if list && d.where&inAxis == 0 {
		p.e.at(val.pos, "%s takes one value, not a list (it cannot be a grid axis)", key)
		return false
	}
	base := root.get(keyBase)
	inBase := base != nil && base.val.kind == mapNode && base.val.get(key) != nil
	if list {
		root.remove(key)
		if inBase {
			root.ownMap(keyBase, keyAt).remove(key)
		}
		root.ownMap(keyGrid, keyAt).set(key, keyAt, val)
		return true
	}
	if g := root.get(keyGrid); g != nil && g.val.kind == mapNode && g.val.get(key) != nil {
		grid := root.ownMap(keyGrid, keyAt)
		grid.remove(key)
		if len(grid.entries) == 0 {
			root.remove(keyGrid)
		}
	}
	if inBase || d.where&inTop == 0 {
		root.ownMap(keyBase, keyAt).set(key, keyAt, val)
	} else {
		root.set(key, keyAt, val)
	}
	return true
}

// setValue reads the value part of a --set flag: one scalar, or a comma-separated
// list (optionally in brackets), each item typed as YAML would type it.
func (p *parsing) setValue(raw string, col int, at func(int) pos) (*node, bool) {
	trimmed := strings.TrimSpace(raw)
	if trimmed == "" {
		p.e.at(at(col), "no value after '='; e.g. --set sharding=full_shard,no_shard")
		return nil, false
	}
	start := col + strings.Index(raw, trimmed)
	bracketed := strings.HasPrefix(trimmed, "[") && strings.HasSuffix(trimmed, "]")
	if bracketed {
		trimmed = trimmed[1 : len(trimmed)-1]
		start++
	}
	if bracketed && strings.TrimSpace(trimmed) == "" {
		p.e.at(at(col), "an empty list gives no values; list at least one, e.g. --set sharding=[full_shard,no_shard]")
		return nil, false
	}
	parts := strings.Split(trimmed, ",")
	if !bracketed && len(parts) == 1 {
		return setScalar(parts[0], at(start)), true
	}
	seq := &node{pos: at(start), kind: seqNode}
	off := start
	ok := true
	for _, part := range parts {
		item := strings.TrimSpace(part)
		itemCol := off + strings.Index(part, item)
		if item == "" {
			p.e.at(at(off), "empty value in the list; remove the extra comma")
			ok = false
		} else {
			seq.items = append(seq.items, setScalar(item, at(itemCol)))
		}
		off += len(part) + 1
	}
	seq.size = 1 + len(seq.items)
	return seq, ok
}

// setScalar types a --set value as a YAML scalar: integers, booleans and null, a
// number with a fraction or exponent as a float, quotes for a string that would
// otherwise be read as one of those.
func setScalar(s string, at pos) *node {
	n := &node{pos: at, kind: scalarNode, val: s, size: 1}
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		n.val = s[1 : len(s)-1]
		return n
	}
	switch s {
	case "true", "True", "TRUE":
		n.val = true
	case "false", "False", "FALSE":
		n.val = false
	case "null", "Null", "NULL", "~":
		n.kind, n.val = nullNode, nil
	default:
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			n.val, n.text = i, s
		} else if f, err := strconv.ParseFloat(s, 64); err == nil && strings.ContainsAny(s, ".eE") && !math.IsInf(f, 0) && !math.IsNaN(f) {
			n.val, n.text = f, s
		}
	}
	return n
}

// applyDynSet applies --set env.NAME=... and --set backend_options.NAME=a,b
// (a comma list without brackets: the option becomes a grid axis, as Hydra's
// multirun reads key=a,b; backend_options.NAME=[a,b] stays one list value). It
// reports whether it handled the flag (a refused one included).
func (p *parsing) applyDynSet(root *node, key string, keyAt pos, val *node, bracketed bool) bool {
	isEnv := strings.HasPrefix(key, envPrefix)
	isOptAxis := strings.HasPrefix(key, optPrefix) && val.kind == seqNode && !bracketed &&
		!strings.Contains(key[len(optPrefix):], ".")
	if !isEnv && !isOptAxis {
		return false
	}
	name := key[strings.IndexByte(key, '.')+1:]
	if _, _, ok := p.dynDef(key, keyAt); !ok {
		return true
	}
	dropGrid := func() {
		if g := root.get(keyGrid); g != nil && g.val.kind == mapNode && g.val.get(key) != nil {
			grid := root.ownMap(keyGrid, keyAt)
			grid.remove(key)
			if len(grid.entries) == 0 {
				root.remove(keyGrid)
			}
		}
	}
	// Drop the single values the flag replaces: env: at the top level and under
	// base:, the option under backend_options:.
	section := keyEnv
	if !isEnv {
		section = keyBackendOptions
	}
	if e := root.get(section); e != nil && e.val.kind == mapNode && e.val.get(name) != nil {
		m := root.ownMap(section, keyAt)
		m.remove(name)
		if len(m.entries) == 0 {
			root.remove(section)
		}
	}
	if base := root.get(keyBase); isEnv && base != nil && base.val.kind == mapNode {
		for _, k := range []string{key, keyEnv} {
			be := base.val.get(k)
			if be == nil {
				continue
			}
			b := root.ownMap(keyBase, keyAt)
			if k == key {
				b.remove(k)
			} else if be.val.kind == mapNode && be.val.get(name) != nil {
				b.ownMap(keyEnv, keyAt).remove(name)
			}
		}
	}
	if val.kind == seqNode {
		root.ownMap(keyGrid, keyAt).set(key, keyAt, val)
		return true
	}
	dropGrid()
	root.ownMap(keyEnv, keyAt).set(name, keyAt, val)
	return true
}

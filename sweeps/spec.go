package sweeps

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// Options changes how a spec is read. The zero value reads the file as written and
// accepts any model, hardware and backend name.
type Options struct {
	// Set holds --set overrides, Hydra style, applied in order before validation:
	// "key=v1,v2" makes (or replaces) a grid axis; "key=v" gives one value to every
	// run (it replaces a grid axis, a base value or a top-level setting of that name).
	// Keys are axis or top-level names; backend_options.NAME=v and
	// launcher_options.NAME=v set one option. Values are read as YAML scalars
	// (1024 is a number, true a boolean); "[a,b]" is a list too.
	Set []string
	// CheckModel validates a model value (a preset name or a config.json path); the
	// error is reported at the value's position. Nil accepts any.
	CheckModel func(string) error
	// CheckHardware validates a hardware profile name; "auto" is never passed. Nil
	// accepts any.
	CheckHardware func(string) error
	// CheckBackend validates a backend name. Nil accepts any.
	CheckBackend func(string) error
	// GPUsPerNode returns how many GPUs one node of a hardware profile holds (0:
	// unknown, auto, or cpu). A run giving world_size alone, more than that, is
	// split into whole nodes of it (Plan.Notes says so) or refused when it does not
	// divide. Nil: world_size alone is one node.
	GPUsPerNode func(hardware string) int
	// Dir is the folder the spec's relative paths resolve against (model:, and
	// the PathOptions and ProgramOptions): Load sets the spec file's folder; empty
	// is the current directory. --set values stay relative to the current directory.
	Dir string
	// PathOptions names the options whose values (a string, or a list of them)
	// are file paths, "backend_options.script"; ProgramOptions those naming a
	// program, resolved only when they hold a slash (a bare name is looked up on
	// PATH), and for a list only its first element (the rest are arguments).
	PathOptions, ProgramOptions []string
	// Stream leaves Plan.Runs empty: Plan.All makes the runs again on each
	// pass, so that a plan of a million grid points holds none of them (a run
	// config is about half a kilobyte). Expansion checks every point as
	// usual. A spec with search: is held as usual: its runs are the first
	// point of each search, chosen over the whole grid.
	Stream bool
}

// Plan is a validated, expanded sweep.
type Plan struct {
	// Name is the sweep's name; results go to <results-dir>/<Name>/.
	Name     string
	Backend  string
	Launcher string
	// Runs are the runs in a deterministic order: grid points in the order of the
	// axes as written (last axis fastest), then include entries. A spec without a
	// grid is one run (the base point), or only its include entries when it has
	// some. IDs are assigned and
	// unique; points that come out identical are merged (the first one stays).
	// Runs share their BackendOptions and LauncherOptions maps: treat them as
	// read-only. A streamed plan (Options.Stream) leaves Runs empty: read the
	// runs with All, and their number with Len, which work on every plan.
	Runs []RunConfig
	// Search is "" or the axis searched adaptively ("batch_per_device"); each run is
	// then the first point of one search (see NextSearchPoint).
	Search string
	// Axes names the axes that take more than one value across Runs: grid axes in
	// the order written, then the others (derived ones included) in canonical order.
	Axes []string
	// Warnings are things in the spec that are legal but probably not meant, such as
	// an exclude entry that matches no point; formatted "file:line:col: msg".
	Warnings []string
	// Notes say how the spec was read where it left a choice to fsdpbench, such as
	// the nodes a world_size given alone was split into.
	Notes []string
	// Resolved is the spec as run (after --set, defaults written out), stored as
	// sweep.yaml: parsing it again gives the same runs.
	Resolved []byte
	// OptionPos is where each backend and launcher option was given, keyed
	// "backend_options.NAME": "file:line:col" (or "--set #N column C"), so a
	// backend's complaint about an option can point at it. A value of a
	// backend_options.NAME axis is keyed "backend_options.NAME=<value as JSON>"
	// (see OptionValueKey).
	OptionPos map[string]string

	// stream makes a streamed plan's runs (nil: Runs holds them).
	stream *planStream
}

// Load reads and parses the spec file at path, its relative paths resolved
// against the file's folder; see Parse.
func Load(path string, opts Options) (*Plan, error) {
	data, err := input.ReadFile(path, input.Spec)
	if err != nil {
		return nil, fmt.Errorf("read sweep spec: %w", err)
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Dir(path)
	}
	return Parse(data, path, opts)
}

// Parse reads a spec (filename is used in error positions), applies opts.Set,
// validates everything and expands it into runs. Problems are reported as a
// *SpecError, or SpecErrors when there are several; malformed YAML keeps goccy's
// error as the SpecError's Err.
func Parse(data []byte, filename string, opts Options) (*Plan, error) {
	p := &parsing{opts: opts, file: filename, dir: specDir(opts.Dir)}
	// Editors on Windows write a byte order mark; YAML allows one at the start.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	// Bound the spec before goccy parses it: its parser takes gigabytes on a few
	// kilobytes of nested brackets.
	if err := input.CheckYAML(filename, data, input.Spec); err != nil {
		var ie *input.Error
		if errors.As(err, &ie) {
			return nil, &SpecError{File: filename, Line: ie.Line, Column: ie.Column, Msg: ie.Msg, Err: err}
		}
		return nil, &SpecError{File: filename, Msg: err.Error(), Err: err}
	}
	if err := checkUTF8(filename, data); err != nil {
		return nil, err
	}
	root := parseYAML(data, filename, &p.e)
	if p.e.failed() {
		return nil, p.e.err()
	}
	if root.kind != mapNode {
		p.e.at(root.pos, "a spec is a mapping of keys (name:, grid:, ...), got %s; see sweeps/examples/quickstart.yaml", root.describe())
		return nil, p.e.err()
	}
	sets := p.applySets(root)
	sp := p.read(root)
	if p.e.failed() {
		return nil, p.e.err()
	}
	plan := p.expand(sp)
	if p.e.failed() {
		return nil, p.e.err()
	}
	plan.OptionPos = sp.optionPos
	p.resolveRuns(plan, sp)
	plan.Warnings = append(plan.Warnings, p.warnings...)
	var err error
	plan.Resolved, err = resolvedYAML(root, filename, sets)
	if err != nil {
		return nil, &SpecError{File: filename, Msg: "cannot write the resolved spec: " + err.Error(), Err: err}
	}
	return plan, nil
}

type parsing struct {
	opts Options
	file string
	e    errs
	// dir is the absolute folder relative paths resolve against; "" when that
	// is the current directory.
	dir string
	// modelPaths maps a model value the spec file wrote to its resolved path,
	// where they differ.
	modelPaths map[string]string
	// hardwarePaths is the same for hardware values that name a profile file
	// (.yaml, .yml).
	hardwarePaths map[string]string
	warnings      []string
	// dynDefs holds the env.NAME and backend_options.NAME keys met so far.
	dynDefs map[string]*keyDef
	// fileHashes caches the content hashes of files by the path opened;
	// modelHashes holds InputHashes by model value as written (nil for one
	// with no file).
	fileHashes  map[string]string
	modelHashes map[string]map[string]string
}

// spec is the checked content of a spec file, before expansion.
type spec struct {
	namePos pos
	// top and base hold single values by field, with the position of their key.
	top, base [numFields]*keyed
	grid      []gridAxis
	exclude   []excludeEntry
	include   []includeEntry
	// excludePos and searchPos are the positions of the exclude: and search: keys.
	excludePos                      pos
	search                          string
	searchPos                       pos
	backendOptions, launcherOptions map[string]any
	optionPos                       map[string]string
	// writtenOptions holds the options whose paths were resolved, as written
	// ("backend_options.script": "train.py").
	writtenOptions map[string]any
	// scriptHash is the content hash of backend_options.script ("" without
	// one, or without a file there).
	scriptHash string
	// env holds the variables given to every run (env: at the top level and
	// under base:), as env.NAME values.
	env []value
}

type keyed struct {
	v      value
	keyPos pos
}

type gridAxis struct {
	d      *keyDef
	keyPos pos
	vals   []value
}

type excludeEntry struct {
	pos   pos
	conds []excludeCond
}

// excludeCond matches when the field holds any of vals; key names the dynamic
// key when f is fDyn.
type excludeCond struct {
	f    field
	key  string
	vals []value
}

type includeEntry struct {
	pos  pos
	vals []value
}

func (p *parsing) read(root *node) *spec {
	sp := &spec{namePos: pos{file: p.file, line: 1, col: 1}}
	for _, e := range root.entries {
		switch e.key {
		case keyBase:
			p.readBase(sp, e)
		case keyGrid:
			p.readGrid(sp, e)
		case keyExclude:
			sp.excludePos = e.keyPos
			p.readExclude(sp, e)
		case keyInclude:
			p.readInclude(sp, e)
		case keySearch:
			sp.searchPos = e.keyPos
			p.readSearch(sp, e)
		case keyBackendOptions:
			var w map[string]any
			sp.backendOptions, w = p.resolveOptions(p.readOptions(e), e)
			sp.writtenOptions = addAll(sp.writtenOptions, w)
			sp.optionPos = optionPositions(sp.optionPos, e)
			p.hashScript(sp, sp.backendOptions, e)
		case keyEnv:
			sp.env = p.addEnv(sp.env, p.readEnvMap(e))
		case keyLauncherOptions:
			var w map[string]any
			sp.launcherOptions, w = p.resolveOptions(p.readOptions(e), e)
			sp.writtenOptions = addAll(sp.writtenOptions, w)
			sp.optionPos = optionPositions(sp.optionPos, e)
		default:
			d, ok := keyByName[e.key]
			switch {
			case ok && d.where&inTop != 0:
				if v, ok := p.readValue(d, e.val); ok {
					sp.top[d.f] = &keyed{v: v, keyPos: e.keyPos}
				}
			case ok:
				p.e.at(e.keyPos, "%s is an axis, not a top-level key: put it under base: (one value for every run) or grid: (a list of values)", e.key)
			default:
				p.unknownTopKey(e)
			}
		}
	}
	if root.get("name") == nil {
		p.e.at(sp.namePos, "the spec needs a name (results go to <results-dir>/<name>/); add e.g. `name: %s`", suggestName(strings.TrimSuffix(baseName(p.file), ".yaml")))
	}
	for f, b := range sp.base {
		if b != nil && sp.top[f] != nil {
			p.e.at(b.keyPos, "%s is set both at the top level (%s) and under base; keep one", keyDefs[f].name, sp.top[f].keyPos)
		}
	}
	for _, g := range sp.grid {
		if g.d.f == fDyn {
			continue // checkDynConflicts
		}
		where := sp.top[g.d.f]
		if where == nil {
			where = sp.base[g.d.f]
		}
		if where != nil {
			p.e.at(g.keyPos, "%s is a grid axis and also has one value at %s; keep one (a grid axis varies across runs, a single value applies to every run)", g.d.name, where.keyPos)
		}
	}
	p.checkDynConflicts(sp)
	return sp
}

func baseName(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[i+1:]
	}
	return path
}

func (p *parsing) unknownTopKey(e *entry) {
	cands := append(append([]string{}, TopLevelKeys...), Axes...)
	hint := ""
	if c := Closest(e.key, cands); c != "" {
		if d, ok := keyByName[c]; ok && d.where&inTop == 0 {
			hint = fmt.Sprintf("; did you mean %s? (an axis: put it under base: or grid:)", c)
		} else {
			hint = "; did you mean " + c + "?"
		}
	}
	p.e.at(e.keyPos, "unknown key %s (allowed: %s%s)", q(e.key), strings.Join(TopLevelKeys, ", "), hint)
}

// axisDef looks up a key used as an axis (in grid, include, exclude), reporting why
// it cannot be one.
func (p *parsing) axisDef(e *entry, where string) (*keyDef, bool) {
	if d, isDyn, ok := p.dynDef(e.key, e.keyPos); isDyn {
		return d, ok
	}
	d, ok := keyByName[e.key]
	if !ok {
		p.e.at(e.keyPos, "unknown axis %s in %s (allowed: %s%s)", q(e.key), where, strings.Join(Axes, ", "), didYouMean(e.key, Axes))
		return nil, false
	}
	if d.where&inAxis == 0 {
		switch d.f {
		case fName:
			p.e.at(e.keyPos, "name is the sweep's name, not an axis; set it at the top level")
		case fBackend:
			p.e.at(e.keyPos, "backend cannot vary inside a sweep (runs of two backends would share run IDs); run the spec once per backend (--set backend=gotrain) and compare the two with `fsdpbench compare`")
		default:
			p.e.at(e.keyPos, "%s cannot be an axis: run IDs name the training configuration and leave %s out, so runs differing only in %s would collide; set it at the top level (or under base:) and run one sweep per value (--set %s=...)", d.name, d.name, d.name, d.name)
		}
		return nil, false
	}
	return d, true
}

func (p *parsing) readBase(sp *spec, e *entry) {
	m := e.val
	if m.kind == nullNode {
		return
	}
	if m.kind != mapNode {
		p.e.at(m.pos, "base must be a mapping of axis: value (e.g. base: {mixed_precision: bf16}), got %s", m.describe())
		return
	}
	for _, be := range m.entries {
		if be.key == keyEnv {
			sp.env = p.addEnv(sp.env, p.readEnvMap(be))
			continue
		}
		if strings.HasPrefix(be.key, envPrefix) {
			if d, _, ok := p.dynDef(be.key, be.keyPos); ok {
				if be.val.kind == seqNode {
					p.e.at(be.val.pos, "base gives one value per key, but %s has a list; to try several, move it to grid:", be.key)
				} else if v, ok := p.readDyn(d, be.val); ok {
					sp.env = p.addEnv(sp.env, []value{v})
				}
			}
			continue
		}
		if strings.HasPrefix(be.key, optPrefix) {
			p.e.at(be.keyPos, "a backend option for every run goes under backend_options: at the top level (backend_options: {%s: ...}); base: takes axes", be.key[len(optPrefix):])
			continue
		}
		d, ok := keyByName[be.key]
		if !ok || d.where&inBase == 0 {
			p.e.at(be.keyPos, "unknown key %s in base (allowed: %s%s)", q(be.key), strings.Join(baseKeys, ", "), didYouMean(be.key, baseKeys))
			continue
		}
		if be.val.kind == seqNode {
			hint := ""
			if d.where&inAxis != 0 {
				hint = "; to try several, move it to grid:"
			}
			p.e.at(be.val.pos, "base gives one value per key, but %s has a list%s", d.name, hint)
			continue
		}
		if v, ok := p.readValue(d, be.val); ok {
			sp.base[d.f] = &keyed{v: v, keyPos: be.keyPos}
		}
	}
}

func (p *parsing) readGrid(sp *spec, e *entry) {
	m := e.val
	if m.kind == nullNode {
		return
	}
	if m.kind != mapNode {
		p.e.at(m.pos, "grid must be a mapping of axis: [values] (e.g. grid: {sharding: [full_shard, ddp]}), got %s", m.describe())
		return
	}
	for _, ge := range m.entries {
		d, ok := p.axisDef(ge, "grid")
		if !ok {
			continue
		}
		items := []*node{ge.val}
		switch ge.val.kind {
		case seqNode:
			items = ge.val.items
		case nullNode:
			items = nil
		}
		if len(items) == 0 {
			p.e.at(ge.val.pos, "grid axis %s has no values; give at least one, or remove the axis", d.name)
			continue
		}
		g := gridAxis{d: d, keyPos: ge.keyPos}
		okAll := true
		for _, it := range items {
			v, ok := p.readValue(d, it)
			if !ok {
				okAll = false
				continue
			}
			for _, prev := range g.vals {
				if prev.equal(v) {
					p.e.at(v.pos, "%s %s is listed twice in the grid (first at %s); remove one", d.name, v, prev.pos)
					ok = false
					break
				}
			}
			if ok {
				g.vals = append(g.vals, v)
				sp.optionPos = valuePosition(sp.optionPos, v)
			}
		}
		if okAll {
			sp.grid = append(sp.grid, g)
		}
	}
}

// readEntries returns the mappings of an exclude: or include: list.
func (p *parsing) readEntries(e *entry, example string) []*node {
	switch e.val.kind {
	case nullNode:
		return nil
	case seqNode:
	default:
		p.e.at(e.val.pos, "%s must be a list of mappings, e.g. %s:\n  - %s", e.key, e.key, example)
		return nil
	}
	var out []*node
	for _, it := range e.val.items {
		if it.kind != mapNode {
			p.e.at(it.pos, "each %s entry must be a mapping of axis: value, e.g. %s; got %s", e.key, example, it.describe())
			continue
		}
		if len(it.entries) == 0 {
			p.e.at(it.pos, "an empty %s entry; give at least one axis: value, or remove it", e.key)
			continue
		}
		out = append(out, it)
	}
	return out
}

func (p *parsing) readExclude(sp *spec, e *entry) {
	for _, m := range p.readEntries(e, "{sharding: no_shard, activation_checkpointing: true}") {
		x := excludeEntry{pos: m.pos}
		ok := true
		for _, xe := range m.entries {
			d, dok := p.axisDef(xe, "exclude")
			if !dok {
				ok = false
				continue
			}
			items := []*node{xe.val}
			if xe.val.kind == seqNode {
				items = xe.val.items // any of these values
			}
			if len(items) == 0 {
				p.e.at(xe.val.pos, "exclude %s has an empty list, so the entry matches nothing; give a value or remove it", d.name)
				ok = false
				continue
			}
			c := excludeCond{f: d.f}
			if d.f == fDyn {
				c.key = d.name
			}
			for _, it := range items {
				v, vok := p.readValue(d, it)
				if !vok {
					ok = false
					continue
				}
				c.vals = append(c.vals, v)
			}
			x.conds = append(x.conds, c)
		}
		if ok {
			sp.exclude = append(sp.exclude, x)
		}
	}
}

func (p *parsing) readInclude(sp *spec, e *entry) {
	for _, m := range p.readEntries(e, "{sharding: ddp, world_size: 2}") {
		in := includeEntry{pos: m.pos}
		ok := true
		for _, ie := range m.entries {
			if ie.key == keyEnv {
				in.vals = append(in.vals, p.readEnvMap(ie)...)
				continue
			}
			d, dok := p.axisDef(ie, "include")
			if !dok {
				ok = false
				continue
			}
			if ie.val.kind == seqNode {
				p.e.at(ie.val.pos, "an include entry gives one value per axis, but %s has a list; add one entry per value", d.name)
				ok = false
				continue
			}
			v, vok := p.readValue(d, ie.val)
			if !vok {
				ok = false
				continue
			}
			in.vals = append(in.vals, v)
			sp.optionPos = valuePosition(sp.optionPos, v)
		}
		if ok {
			sp.include = append(sp.include, in)
		}
	}
}

// SearchMaxFit is the only search mode: per point of the other axes, double
// batch_per_device from its smallest value until a run does not fit, then bisect
// between the last fit and the first failure (see MaxFit).
const SearchMaxFit = "max_fit"

func (p *parsing) readSearch(sp *spec, e *entry) {
	m := e.val
	if m.kind == nullNode {
		return
	}
	const want = "search supports one form: `search: {batch_per_device: max_fit}`"
	if m.kind != mapNode || len(m.entries) == 0 {
		p.e.at(m.pos, "%s, got %s", want, m.describe())
		return
	}
	for _, se := range m.entries {
		if se.key != "batch_per_device" {
			p.e.at(se.keyPos, "%s; %s cannot be searched%s", want, q(se.key), didYouMean(se.key, []string{"batch_per_device"}))
			continue
		}
		mode, _ := se.val.val.(string)
		if se.val.kind != scalarNode || mode != SearchMaxFit {
			p.e.at(se.val.pos, "unknown search mode %s for batch_per_device (allowed: max_fit%s)", quoted(se.val), didYouMean(mode, []string{SearchMaxFit}))
			continue
		}
		sp.search = "batch_per_device"
	}
}

func (p *parsing) readOptions(e *entry) map[string]any {
	switch e.val.kind {
	case nullNode:
		return nil
	case mapNode:
		return e.val.toAny().(map[string]any)
	}
	p.e.at(e.val.pos, "%s must be a mapping of option: value (e.g. %s: {inter_node_bus_bw_gbps: 3}), got %s", e.key, e.key, e.val.describe())
	return nil
}

// optionPositions adds where each option under e (backend_options: or
// launcher_options:) was given.
func optionPositions(m map[string]string, e *entry) map[string]string {
	if e.val.kind != mapNode {
		return m
	}
	if m == nil {
		m = map[string]string{}
	}
	for _, o := range e.val.entries {
		at := o.keyPos
		where := at.file
		switch {
		case at.file == setFile:
			where = "--set #" + strconv.Itoa(at.line) + " column " + strconv.Itoa(at.col)
		case at.line > 0:
			where += ":" + strconv.Itoa(at.line) + ":" + strconv.Itoa(at.col)
		}
		m[e.key+"."+o.key] = where
	}
	return m
}

// Defaults returns the settings and axis values a run has when the spec does not
// give them. World size, global batch and the ID are left for expansion to fill.
func Defaults() RunConfig {
	return RunConfig{
		Backend:          "sim",
		Launcher:         LauncherLocal,
		Hardware:         HardwareAuto,
		Model:            "tiny",
		SeqLen:           512,
		Steps:            20,
		WarmupSteps:      3,
		Repeats:          1,
		Timeout:          Duration(30 * time.Minute),
		BatchPerDevice:   1,
		GradAccum:        1,
		Sharding:         FullShard,
		BackwardPrefetch: BackwardPre,
		MixedPrecision:   BF16,
		WrapPolicy:       "transformer",
		Checkpoint:       CheckpointNone,
	}
}

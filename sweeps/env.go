package sweeps

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Environment variables and backend options as axes (issue 30). A spec gives
// variables with `env: {NAME: value}` (top level, base:, include entries) and
// varies them with `env.NAME` as an axis (grid, include, exclude, --set); it
// varies one backend option with `backend_options.NAME` the same way. Both are
// keys the field table cannot list, so they share one field, fDyn, and a value
// carries its key.

// fDyn is the field of every env.NAME and backend_options.NAME value: outside
// keyDefs, so code indexing it by field must check for it first.
const fDyn = numFields

// Prefixes of the dynamic keys.
const (
	keyEnv    = "env"
	envPrefix = keyEnv + "."
	optPrefix = keyBackendOptions + "."
)

// Bounds of the environment a spec gives a run: past any real variable (a
// PYTORCH_CUDA_ALLOC_CONF or an NCCL_IB_HCA list is under 200 bytes), and small
// enough that a run's environment stays far below the kernel's limits on an
// exec (128 KiB per string, 2 MiB in all).
const (
	// MaxEnvName bounds a variable's name.
	MaxEnvName = 128
	// MaxEnvValue bounds a variable's value, in bytes.
	MaxEnvValue = 4096
	// MaxEnvVars bounds how many variables one run gets from the spec.
	MaxEnvVars = 128
)

var envNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// harnessEnv are the variables fsdpbench or the launchers it drives set for a
// run's processes, with why a spec cannot set them.
var harnessEnv = map[string]string{
	"RANK":                 "torchrun and the gotrain launcher set it per rank",
	"WORLD_SIZE":           "the harness sets it from world_size; change the axis instead",
	"LOCAL_RANK":           "torchrun and the gotrain launcher set it per rank",
	"LOCAL_WORLD_SIZE":     "the harness sets it from gpus_per_node; change the axis instead",
	"GROUP_RANK":           "the launcher sets it per node",
	"GROUP_WORLD_SIZE":     "the launcher sets it from nodes",
	"NODE_RANK":            "the launcher sets it per node",
	"ROLE_RANK":            "torchrun sets it per rank",
	"ROLE_WORLD_SIZE":      "torchrun sets it from world_size",
	"MASTER_ADDR":          "the harness points it at the run's first node (Slurm: the allocation's first host)",
	"MASTER_PORT":          "the harness picks a free port per run (Slurm: one per job)",
	"CUDA_VISIBLE_DEVICES": "the harness hands each run its GPUs through it; to restrict the GPUs fsdpbench uses, set it for fsdpbench itself",
	"TMPDIR":               "the harness gives each run a temporary directory it removes afterwards",
}

// harnessEnvPrefixes are the name prefixes of variables the harness or Slurm own.
var harnessEnvPrefixes = map[string]string{
	"FSDPBENCH_":    "fsdpbench sets its FSDPBENCH_ variables for the run (its paths, ID and configuration)",
	"TORCHELASTIC_": "torchrun sets the TORCHELASTIC_ variables",
	"SLURM_":        "Slurm sets the SLURM_ variables of every task; give Slurm settings under launcher_options",
}

// CheckEnvName says why a spec cannot set the variable name, or "" when it can.
func CheckEnvName(name string) string {
	switch {
	case name == "":
		return "an environment variable needs a name"
	case len(name) > MaxEnvName:
		return fmt.Sprintf("environment variable name %s is longer than %d characters", q(name), MaxEnvName)
	case !envNameRE.MatchString(name):
		return fmt.Sprintf("environment variable name %s must be upper-case letters, digits and '_', not starting with a digit ([A-Z_][A-Z0-9_]*)", q(name))
	}
	if why, ok := harnessEnv[name]; ok {
		return fmt.Sprintf("%s belongs to the harness and cannot be set by a spec: %s", name, why)
	}
	for p, why := range harnessEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Sprintf("%s belongs to the harness and cannot be set by a spec: %s", name, why)
		}
	}
	return ""
}

// checkEnvValue says why a value cannot be given to a variable, or "".
func checkEnvValue(name, v string) string {
	if len(v) > MaxEnvValue {
		return fmt.Sprintf("env %s: the value is %d bytes, more than %d", name, len(v), MaxEnvValue)
	}
	if !utf8.ValidString(v) {
		// A run's ID hashes the value as JSON, which writes every such byte as
		// U+FFFD: two different values would name one run.
		return fmt.Sprintf("env %s: the value holds bytes that are not UTF-8; environment values are UTF-8 text", name)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Sprintf("env %s: the value holds a control character (byte %d); environment values are one line of text", name, i)
		}
	}
	return ""
}

// dynDef returns the key definition of an env.NAME or backend_options.NAME
// axis key, or nil when key is neither. A bad name is reported at at; ok is false.
func (p *parsing) dynDef(key string, at pos) (d *keyDef, isDyn, ok bool) {
	var name string
	switch {
	case strings.HasPrefix(key, envPrefix):
		name = key[len(envPrefix):]
		if msg := CheckEnvName(name); msg != "" {
			p.e.at(at, "%s", msg)
			return nil, true, false
		}
	case strings.HasPrefix(key, optPrefix):
		name = key[len(optPrefix):]
		if name == "" || strings.Contains(name, ".") || len(name) > MaxEnvName {
			p.e.at(at, "backend option axis %s: name one option, backend_options.NAME (a nested option cannot be an axis)", q(key))
			return nil, true, false
		}
		if slices.Contains(p.opts.PathOptions, key) || slices.Contains(p.opts.ProgramOptions, key) {
			// Run IDs hash paths as the spec wrote them, relative to its folder;
			// an axis value would be hashed as resolved here.
			p.e.at(at, "%s names a file and cannot be an axis; give it under backend_options: and run one sweep per value (--set %s=...)", key, key)
			return nil, true, false
		}
	default:
		return nil, false, false
	}
	if d, ok := p.dynDefs[key]; ok {
		return d, true, true
	}
	if p.dynDefs == nil {
		p.dynDefs = map[string]*keyDef{}
	}
	d = &keyDef{name: key, f: fDyn, kind: kindString, where: inAxis}
	p.dynDefs[key] = d
	return d, true, true
}

// readDyn checks one scalar n as a value of the dynamic key d.
func (p *parsing) readDyn(d *keyDef, n *node) (value, bool) {
	v := value{f: fDyn, key: d.name, pos: n.pos}
	if n.kind != scalarNode {
		what := "a string (an environment variable's value)"
		if !strings.HasPrefix(d.name, envPrefix) {
			what = "one value (a list or mapping option is set under backend_options:, once per sweep)"
		}
		p.e.at(n.pos, "%s must be %s, got %s", d.name, what, n.describe())
		return v, false
	}
	if name, isEnv := strings.CutPrefix(d.name, envPrefix); isEnv {
		s, ok := envString(n)
		if !ok {
			p.e.at(n.pos, "env %s must be a string, number or boolean, got %s", name, n.describe())
			return v, false
		}
		if msg := checkEnvValue(name, s); msg != "" {
			p.e.at(n.pos, "%s", msg)
			return v, false
		}
		v.s = s
		return v, true
	}
	v.raw = n.val
	b, err := json.Marshal(n.val)
	if err != nil {
		p.e.at(n.pos, "%s: cannot use %s as an option value", d.name, n.describe())
		return v, false
	}
	v.s = string(b)
	return v, true
}

// envString is a scalar as an environment variable's value: a string as it
// is, a number or boolean as the spec wrote it (OMP_NUM_THREADS: 4 is "4").
func envString(n *node) (string, bool) {
	switch x := n.val.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int64:
		if n.text != "" {
			return n.text, true
		}
		return strconv.FormatInt(x, 10), true
	case float64:
		if n.text != "" {
			return n.text, true
		}
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	}
	return "", false
}

// readEnvMap reads an env: mapping (top level, base:, an include entry) as
// env.NAME values.
func (p *parsing) readEnvMap(e *entry) []value {
	m := e.val
	if m.kind == nullNode {
		return nil
	}
	if m.kind != mapNode {
		p.e.at(m.pos, "env must be a mapping of VARIABLE: value (e.g. env: {NCCL_DEBUG: INFO}), got %s", m.describe())
		return nil
	}
	if len(m.entries) > MaxEnvVars {
		p.e.at(m.pos, "env gives %d variables, more than %d", len(m.entries), MaxEnvVars)
		return nil
	}
	var out []value
	for _, ve := range m.entries {
		d, _, ok := p.dynDef(envPrefix+ve.key, ve.keyPos)
		if !ok {
			continue
		}
		if ve.val.kind == seqNode {
			p.e.at(ve.val.pos, "env %s has a list; to try several values, make it an axis: grid: {env.%s: [...]}", ve.key, ve.key)
			continue
		}
		if v, ok := p.readDyn(d, ve.val); ok {
			out = append(out, v)
		}
	}
	return out
}

// applyDyn writes a dynamic value into rc. Runs share their maps, so it
// replaces them rather than writing into them.
func (v value) applyDyn(rc *RunConfig) {
	if name, ok := strings.CutPrefix(v.key, envPrefix); ok {
		env := make(map[string]string, len(rc.Env)+1)
		maps.Copy(env, rc.Env)
		env[name] = v.s
		rc.Env = env
		return
	}
	name := v.key[len(optPrefix):]
	opts := make(map[string]any, len(rc.BackendOptions)+1)
	maps.Copy(opts, rc.BackendOptions)
	opts[name] = v.raw
	rc.BackendOptions = opts
	if !slices.Contains(rc.OptionAxes, name) {
		axes := append(slices.Clip(rc.OptionAxes), name)
		sort.Strings(axes)
		rc.OptionAxes = axes
	}
}

// dynValue reads the dynamic key of rc as a value; ok is false when rc lacks it.
func dynValue(rc *RunConfig, key string) (value, bool) {
	v := value{f: fDyn, key: key}
	if name, isEnv := strings.CutPrefix(key, envPrefix); isEnv {
		s, ok := rc.Env[name]
		v.s = s
		return v, ok
	}
	raw, ok := rc.BackendOptions[key[len(optPrefix):]]
	if !ok {
		return v, false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return v, false
	}
	v.raw, v.s = raw, string(b)
	return v, true
}

// dynString renders a dynamic value as a spec writes it.
func (v value) dynString() string {
	if strings.HasPrefix(v.key, envPrefix) {
		return v.s
	}
	return fmt.Sprint(v.raw)
}

// checkDynConflicts refuses a dynamic key given both as a grid axis and as one
// value for every run.
func (p *parsing) checkDynConflicts(sp *spec) {
	for _, g := range sp.grid {
		if g.d.f != fDyn {
			continue
		}
		for _, v := range sp.env {
			if v.key == g.d.name {
				p.e.at(g.keyPos, "%s is a grid axis and also has one value at %s; keep one (a grid axis varies across runs, a single value applies to every run)", g.d.name, v.pos)
			}
		}
		if name, ok := strings.CutPrefix(g.d.name, optPrefix); ok {
			if _, given := sp.backendOptions[name]; given {
				at := sp.optionPos[g.d.name]
				p.e.at(g.keyPos, "%s is a grid axis and also has one value under backend_options: (%s); keep one", g.d.name, at)
			}
		}
	}
}

// dynKeys lists the dynamic keys the spec varies (grid axes in order, then
// include entries' keys), for Plan.Axes.
func (sp *spec) dynKeys() []string {
	var out []string
	for _, g := range sp.grid {
		if g.d.f == fDyn {
			out = append(out, g.d.name)
		}
	}
	for _, in := range sp.include {
		for _, v := range in.vals {
			if v.f == fDyn && !slices.Contains(out, v.key) {
				out = append(out, v.key)
			}
		}
	}
	return out
}

// dynVariesIn reports whether the runs differ in the dynamic key.
func dynVariesIn(runs []RunConfig, key string) bool {
	first, firstOK := dynValue(&runs[0], key)
	for i := 1; i < len(runs); i++ {
		v, ok := dynValue(&runs[i], key)
		if ok != firstOK || v.s != first.s {
			return true
		}
	}
	return false
}

// addEnv adds variables given once for every run, refusing one given twice.
func (p *parsing) addEnv(have, more []value) []value {
	for _, v := range more {
		dup := false
		for _, h := range have {
			if h.key == v.key {
				p.e.at(v.pos, "%s is given twice (first at %s); keep one", v.key, h.pos)
				dup = true
			}
		}
		if !dup {
			have = append(have, v)
		}
	}
	if len(have) > MaxEnvVars {
		p.e.at(have[MaxEnvVars].pos, "more than %d environment variables for every run", MaxEnvVars)
		return have[:MaxEnvVars]
	}
	return have
}

// OptionValueKey is the Plan.OptionPos key of one value of a backend option
// axis: where that value was written, for a backend's complaint about it in
// the runs that have it.
func OptionValueKey(name string, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return optPrefix + name
	}
	return optPrefix + name + "=" + string(b)
}

// valuePosition records where a value of a backend option axis was written.
func valuePosition(m map[string]string, v value) map[string]string {
	name, ok := strings.CutPrefix(v.key, optPrefix)
	if v.f != fDyn || !ok {
		return m
	}
	if m == nil {
		m = map[string]string{}
	}
	k := OptionValueKey(name, v.raw)
	if _, seen := m[k]; !seen {
		m[k] = where(v.pos)
	}
	return m
}

// where renders a position as OptionPos does: "file:line:col", or
// "--set #N column C" for a flag.
func where(at pos) string {
	switch {
	case at.file == setFile:
		return "--set #" + strconv.Itoa(at.line) + " column " + strconv.Itoa(at.col)
	case at.line > 0:
		return at.file + ":" + strconv.Itoa(at.line) + ":" + strconv.Itoa(at.col)
	}
	return at.file
}

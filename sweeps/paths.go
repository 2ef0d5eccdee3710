package sweeps

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Paths in a spec are relative to the spec file's folder (Options.Dir), as in
// Docker Compose files, Hydra configs and Kubernetes manifests, so a spec runs the
// same from any current directory. --set values stay relative to the current
// directory, where the user typed them.
//
// A run keeps the path as written in SpecPaths and the resolved one in its
// field: run IDs and fingerprints hash what was written, so moving a spec with
// its files, or running it from elsewhere, names the same runs, and results
// stored before paths were resolved this way stay done.

// resolvePath returns the path to use for s, a value the spec file gave (at) for
// key: s itself when it is absolute, when the spec's folder is the current
// directory, or when nothing exists at the spec-relative path (a preset name, a
// Hugging Face ID, a path the backend will report missing); the absolute
// spec-relative path when something exists there. A program (python, a command)
// without a slash is looked up on PATH and left alone. A path found only
// relative to the current directory still works, with a warning saying how to
// write it.
func (p *parsing) resolvePath(s string, at pos, key string, program bool) string {
	if p.dir == "" || s == "" || filepath.IsAbs(s) || (program && !strings.ContainsRune(s, '/')) {
		return s
	}
	cand := filepath.Join(p.dir, s)
	if _, err := os.Stat(cand); err == nil {
		if abs, err := filepath.Abs(cand); err == nil {
			return abs
		}
		return cand
	}
	if _, err := os.Stat(s); err == nil {
		want := s
		if abs, err := filepath.Abs(s); err == nil {
			if rel, err := filepath.Rel(p.dir, abs); err == nil {
				want = rel
			}
		}
		p.warnings = append(p.warnings, at.errorf("%s %s is found relative to the current directory, not to the spec's folder %s; paths in a spec are relative to the spec file (as in Docker Compose): write %s",
			key, q(s), p.dir, q(filepath.ToSlash(want))).Error())
	}
	return s
}

// specDir is the folder a spec's relative paths resolve against: dir, made
// absolute, or "" when it is the current directory (nothing to resolve: paths
// read as they always did, and runs keep the fields as written).
func specDir(dir string) string {
	if dir == "" {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	if wd, err := os.Getwd(); err == nil && wd == abs {
		return ""
	}
	return abs
}

// resolveOptions resolves the path options (Options.PathOptions, .ProgramOptions)
// that the spec file gave in m, the options under e (backend_options: or
// launcher_options:). It returns the map to use, a copy when anything changed,
// and the values as written of what changed, keyed "section.NAME".
func (p *parsing) resolveOptions(m map[string]any, e *entry) (map[string]any, map[string]any) {
	if p.dir == "" || len(m) == 0 || e.val.kind != mapNode {
		return m, nil
	}
	var out, written map[string]any
	for _, o := range e.val.entries {
		key := e.key + "." + o.key
		program := slices.Contains(p.opts.ProgramOptions, key)
		if o.val.pos.file == setFile || (!program && !slices.Contains(p.opts.PathOptions, key)) {
			continue // --set values are relative to the current directory
		}
		v := m[o.key]
		var nv any
		switch x := v.(type) {
		case string:
			if r := p.resolvePath(x, o.val.pos, key, program); r != x {
				nv = r
			}
		case []any:
			for i, el := range x {
				s, ok := el.(string)
				if !ok || (program && i > 0) {
					continue // a program's arguments are its own business
				}
				if r := p.resolvePath(s, o.val.pos, key, program); r != s {
					if nv == nil {
						nv = slices.Clone(x)
					}
					nv.([]any)[i] = r
				}
			}
		}
		if nv == nil {
			continue
		}
		if out == nil {
			out, written = maps.Clone(m), map[string]any{}
		}
		out[o.key], written[key] = nv, v
	}
	if out == nil {
		return m, nil
	}
	return out, written
}

func addAll(m, more map[string]any) map[string]any {
	if len(more) == 0 {
		return m
	}
	if m == nil {
		m = map[string]any{}
	}
	maps.Copy(m, more)
	return m
}

// resolveModel records the resolved path of a model value the spec file gave.
func (p *parsing) resolveModel(s string, at pos) {
	if at.file == setFile {
		return
	}
	if r := p.resolvePath(s, at, "model", false); r != s {
		if p.modelPaths == nil {
			p.modelPaths = map[string]string{}
		}
		p.modelPaths[s] = r
	}
}

// resolveHardware records the resolved path of a hardware value the spec file
// gave that names a profile file (.yaml or .yml), as model: paths are.
func (p *parsing) resolveHardware(s string, at pos) {
	l := strings.ToLower(s)
	if at.file == setFile || !(strings.HasSuffix(l, ".yaml") || strings.HasSuffix(l, ".yml")) {
		return
	}
	if r := p.resolvePath(s, at, "hardware", false); r != s {
		if p.hardwarePaths == nil {
			p.hardwarePaths = map[string]string{}
		}
		p.hardwarePaths[s] = r
	}
}

// hardwarePath is the path a hardware value opens: resolved when the spec file
// gave it.
func (p *parsing) hardwarePath(s string) string {
	if r, ok := p.hardwarePaths[s]; ok {
		return r
	}
	return s
}

// modelPath is the path a model value opens: resolved when the spec file gave it.
func (p *parsing) modelPath(s string) string {
	if r, ok := p.modelPaths[s]; ok {
		return r
	}
	return s
}

// resolveRuns gives the runs their resolved paths, keeping what was written in
// SpecPaths (expansion, exclude matching and the IDs all used what was written).
// Runs with the same model share one SpecPaths map, as they share options. A
// streamed plan's grid runs get theirs as Plan.All makes them.
func (p *parsing) resolveRuns(plan *Plan, sp *spec) {
	r := p.pathResolver(sp)
	if r == nil {
		return
	}
	for i := range plan.Runs {
		r.resolve(&plan.Runs[i])
	}
	if plan.stream != nil {
		for i := range plan.stream.include {
			r.resolve(&plan.stream.include[i])
		}
		plan.stream.paths = r
	}
}

// pathResolver gives runs their resolved paths (resolveRuns); nil when the
// spec resolved none.
func (p *parsing) pathResolver(sp *spec) *pathResolver {
	if len(p.modelPaths) == 0 && len(p.hardwarePaths) == 0 && len(sp.writtenOptions) == 0 {
		return nil
	}
	return &pathResolver{p: p, written: sp.writtenOptions, shared: map[[2]string]map[string]any{}}
}

// pathResolver holds the SpecPaths maps made so far, by model and hardware as
// written. mu guards shared: a streamed plan's runs may be made on several
// goroutines at once.
type pathResolver struct {
	p       *parsing
	written map[string]any
	mu      sync.Mutex
	shared  map[[2]string]map[string]any
}

// resolve gives rc its resolved paths and SpecPaths.
func (r *pathResolver) resolve(rc *RunConfig) {
	p := r.p
	key := [2]string{rc.Model, rc.Hardware}
	r.mu.Lock()
	written, ok := r.shared[key]
	if !ok {
		written = maps.Clone(r.written)
		for _, x := range []struct {
			name, v string
			paths   map[string]string
		}{{"model", rc.Model, p.modelPaths}, {"hardware", rc.Hardware, p.hardwarePaths}} {
			if _, resolved := x.paths[x.v]; resolved {
				if written == nil {
					written = map[string]any{}
				}
				written[x.name] = x.v
			}
		}
		r.shared[key] = written
	}
	r.mu.Unlock()
	rc.Model, rc.Hardware = p.modelPath(rc.Model), p.hardwarePath(rc.Hardware)
	rc.SpecPaths = written
}

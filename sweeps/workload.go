package sweeps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// What a run trains enters its ID (issue 37 §2). A run ID hashes the training
// configuration and leaves out how it is launched, so gotrain and the torchrun
// backend running the project's script on the same built-in model share IDs:
// that is how the two engines are compared. But a user's script (nanoGPT's
// train.py under launcher: python, with model: tiny as a label) trains a model
// of its own, and got the ID of the Go trainer's built-in tiny: `compare`
// paired the two and printed +409.82% with no word that the scripts differed.
// So the ID also hashes, when there are any:
//
//   - the program the run starts instead of the project's script:
//     backend_options.script (the path as the spec wrote it, so a spec and its
//     files moved to another machine name the same runs, and the file's
//     content), backend_options.command, and their arguments (args,
//     extra_args) as written;
//   - the content of the model's config.json when the model axis names a file
//     (its path as written was hashed already; editing the file changes the
//     model).
//
// Runs without these keep the IDs they had. Runs with them got new IDs in
// WorkloadIDChange; a gate against an older baseline says so (OldWorkloadID).

// WorkloadIDChange names the version whose run IDs first hashed the workload:
// runs with a user script, a command or a model file had other IDs before.
const WorkloadIDChange = "fsdpbench issue 37 (November 2026)"

// programOptions are the backend options that say which program a run starts
// and with which arguments, when it is not the project's script: in the ID
// when the run has a program of its own (hasProgram). Sorted.
var programOptions = []string{"args", "command", "extra_args", "script"}

// Keys of RunConfig.InputHashes.
const (
	inputModel  = "model"
	inputScript = optPrefix + "script"
)

// MaxScriptBytes bounds a training script the run ID hashes: far beyond any
// script (nanoGPT's train.py is 15 KB), so a path naming a data file or a
// binary by mistake is refused instead of read whole.
const MaxScriptBytes = 16 << 20

// scriptLimits bounds the read of backend_options.script.
var scriptLimits = input.Limits{What: "training script", MaxBytes: MaxScriptBytes}

// hasProgram reports whether rc starts a program of the user's instead of the
// project's script: a non-empty backend_options.script, or a command.
func (rc *RunConfig) hasProgram() bool {
	if s, ok := rc.BackendOptions["script"].(string); ok && s != "" {
		return true
	}
	return rc.BackendOptions["command"] != nil
}

// writtenOption is backend option name as the spec wrote it (SpecPaths holds
// a resolved path's written form).
func (rc *RunConfig) writtenOption(name string) (any, bool) {
	if v, ok := rc.SpecPaths[optPrefix+name]; ok {
		return v, true
	}
	v, ok := rc.BackendOptions[name]
	return v, ok
}

// workloadKey is the workload part of the training key (see above), nil for a
// run of the built-in model.
func (rc *RunConfig) workloadKey() map[string]any {
	program := rc.hasProgram()
	if !program && len(rc.InputHashes) == 0 {
		return nil
	}
	m := map[string]any{}
	if program {
		for _, name := range programOptions {
			if v, ok := rc.writtenOption(name); ok && v != nil {
				m[name] = v
			}
		}
	}
	if len(rc.InputHashes) > 0 {
		m["sha256"] = rc.InputHashes
	}
	return m
}

// appendWorkloadKey appends the workload part of the training key (nothing
// for a run of the built-in model), as json.Marshal writes the struct's field.
func (rc *RunConfig) appendWorkloadKey(b []byte) []byte {
	w := rc.workloadKey()
	if w == nil {
		return b
	}
	j, err := json.Marshal(w)
	if err != nil {
		j = []byte(strconv.Quote(fmt.Sprint(w)))
	}
	b = append(b, `,"workload":`...)
	return append(b, j...)
}

// OldWorkloadID is the ID rc would have had before WorkloadIDChange: the
// same slug, and the hash of the training key without its workload part. ok
// is false when that is rc's ID now (a run of the built-in model).
func (rc RunConfig) OldWorkloadID() (id string, ok bool) {
	if rc.workloadKey() == nil {
		return rc.ID, false
	}
	var buf [512]byte
	sum := sha256.Sum256(rc.appendKey(buf[:0], false))
	return rc.MakeSlug() + "-" + hex.EncodeToString(sum[:HashBytes]), true
}

// StoredBeforeWorkloadIDs reports whether rc, a stored config, carries an ID
// given before WorkloadIDChange that the run would not get now: it starts a
// program of its own or names a model file, records no content hashes, and
// its ID is the old one.
func (rc RunConfig) StoredBeforeWorkloadIDs() bool {
	if len(rc.InputHashes) > 0 || !(rc.hasProgram() || modelIsFile(rc.writtenModel())) {
		return false
	}
	var buf [512]byte
	sum := sha256.Sum256(rc.appendKey(buf[:0], false))
	return rc.ID == rc.MakeSlug()+"-"+hex.EncodeToString(sum[:HashBytes])
}

// modelIsFile says whether a model value names a config.json rather than a
// preset: it holds a path separator or ends in .json (backends/shapes.IsPath,
// which sweeps cannot import).
func modelIsFile(m string) bool {
	return strings.ContainsRune(m, '/') || strings.ContainsRune(m, filepath.Separator) ||
		strings.HasSuffix(strings.ToLower(m), ".json")
}

// fileHash is the SHA-256 (hex) of the file at path, read within lim, for key
// (what the spec calls it) written at at; "" when there is no file there (the
// backend, or the model check, names a missing file: the ID then hashes the
// path alone). A file that cannot be read is a spec error naming it: an ID
// that silently left the content out would name two workloads alike.
func (p *parsing) fileHash(key, path string, lim input.Limits, at pos) string {
	if h, ok := p.fileHashes[path]; ok {
		return h
	}
	data, err := input.ReadFile(path, lim)
	h := ""
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		p.e.at(at, "%s %s: %v; the run ID hashes the file's content, so it must be readable", key, q(path), err)
	default:
		sum := sha256.Sum256(data)
		h = hex.EncodeToString(sum[:])
	}
	if p.fileHashes == nil {
		p.fileHashes = map[string]string{}
	}
	p.fileHashes[path] = h
	return h
}

// hashModel records the content hash of a model value that names a file, by
// the value as written (call after resolveModel).
func (p *parsing) hashModel(s string, at pos) {
	if !modelIsFile(s) {
		return
	}
	if _, done := p.modelHashes[s]; done {
		return
	}
	h := p.fileHash("model", p.modelPath(s), input.ModelConfig, at)
	if p.modelHashes == nil {
		p.modelHashes = map[string]map[string]string{}
	}
	if h == "" {
		p.modelHashes[s] = nil
		return
	}
	p.modelHashes[s] = map[string]string{inputModel: h}
}

// hashScript records the content hash of backend_options.script, given under
// e (backend_options:) and resolved in opts.
func (p *parsing) hashScript(sp *spec, opts map[string]any, e *entry) {
	s, ok := opts["script"].(string)
	if !ok || s == "" {
		return
	}
	at := e.keyPos
	if se := e.val.get("script"); se != nil {
		at = se.val.pos
	}
	sp.scriptHash = p.fileHash(inputScript, s, scriptLimits, at)
}

// inputHashes gives rc (a point being expanded, its model as written) the
// content hashes of its files. Points of one model share one map.
func (x *expander) inputHashes(rc *RunConfig) {
	if x.sp.scriptHash == "" && len(x.p.modelHashes) == 0 {
		return
	}
	model := x.p.modelHashes[rc.Model]
	if x.sp.scriptHash == "" {
		rc.InputHashes = model
		return
	}
	if m, ok := x.inputs[rc.Model]; ok {
		rc.InputHashes = m
		return
	}
	m := maps.Clone(model)
	if m == nil {
		m = map[string]string{}
	}
	m[inputScript] = x.sp.scriptHash
	if x.inputs == nil {
		x.inputs = map[string]map[string]string{}
	}
	x.inputs[rc.Model] = m
	rc.InputHashes = m
}

// Differences names what two runs paired by ID (compare, gate) differ in that
// says they may not run the same workload: the backend, the launcher (where,
// and how the script is started), the program (script, command, their
// arguments, a script's content) and the model's definition (a config.json's
// content, backend_options.model_impl). The ID leaves the backend and the
// launcher out on purpose (that is how engines are compared), and runs stored
// before WorkloadIDChange share IDs across programs: each difference is one
// phrase, "backend: gotrain vs torchrun"; nil when none.
func Differences(a, b *RunConfig) []string {
	var out []string
	add := func(what string, x, y any, okX, okY bool) {
		if okX == okY && reflect.DeepEqual(x, y) {
			return
		}
		out = append(out, what+": "+shown(x, okX)+" vs "+shown(y, okY))
	}
	add("backend", a.Backend, b.Backend, a.Backend != "", b.Backend != "")
	add("launcher", a.Launcher, b.Launcher, a.Launcher != "", b.Launcher != "")
	la, okA := a.BackendOptions["launcher"]
	lb, okB := b.BackendOptions["launcher"]
	add("backend_options.launcher", la, lb, okA, okB)
	for _, name := range programOptions {
		x, okX := a.writtenOption(name)
		y, okY := b.writtenOption(name)
		add(optPrefix+name, x, y, okX, okY)
	}
	for _, k := range []string{inputScript, inputModel} {
		x, okX := a.InputHashes[k]
		y, okY := b.InputHashes[k]
		if okX && okY && x != y {
			what := "the script's content"
			if k == inputModel {
				what = "the model's config.json content"
			}
			out = append(out, what+": sha256 "+x[:min(12, len(x))]+"… vs "+y[:min(12, len(y))]+"…")
		}
	}
	mi, okA := a.BackendOptions["model_impl"]
	mj, okB := b.BackendOptions["model_impl"]
	add("backend_options.model_impl", mi, mj, okA, okB)
	return out
}

// shown renders one side of a difference: the value as JSON, quoted and
// clipped as messages quote the spec, or "none".
func shown(v any, ok bool) string {
	if !ok || v == nil {
		return "none"
	}
	if s, isStr := v.(string); isStr {
		return q(s)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return q(fmt.Sprint(v))
	}
	return clip(string(j))
}

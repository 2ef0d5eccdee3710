package sweeps

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// Run IDs by property (issue 37): two run configurations that differ in
// anything a run reads get different IDs; equal ones get equal IDs. What a
// run does not read is notInID (and idPartly), in config.go, with why; the
// tests below check that list by reflection and over generated specs.

// kv is one key: value line of a generated spec; v is YAML as written.
type kv struct{ k, v string }

// idSpec is a generated spec: every key of keyDefs may be given (under base:,
// or at the top level for the keys only it takes), with env variables,
// backend options (a user's script, command and arguments among them), an
// option axis, launcher options and a max_fit search.
type idSpec struct {
	top, base, env, opts, lopts []kv
	optAxis                     *kv
	search                      bool
	// files holds the content of each file of idFiles, drawn: a path and a
	// content can each differ alone.
	files map[string]string
}

// render writes the spec as YAML.
func (s idSpec) render() string {
	var b strings.Builder
	if !slices.ContainsFunc(s.top, func(e kv) bool { return e.k == "name" }) {
		b.WriteString("name: p\n")
	}
	section := func(name string, kvs []kv) {
		if len(kvs) == 0 {
			return
		}
		b.WriteString(name + ":\n")
		for _, e := range kvs {
			b.WriteString("  " + e.k + ": " + e.v + "\n")
		}
	}
	for _, e := range s.top {
		b.WriteString(e.k + ": " + e.v + "\n")
	}
	section("base", s.base)
	section("env", s.env)
	section("backend_options", s.opts)
	section("launcher_options", s.lopts)
	if s.optAxis != nil {
		b.WriteString("grid:\n  " + s.optAxis.k + ": [" + s.optAxis.v + "]\n")
	}
	if s.search {
		b.WriteString("search: {batch_per_device: max_fit}\n")
	}
	return b.String()
}

// idFiles are the files the generated specs name, beside them, with the
// contents each may have.
var idFiles = map[string][]string{
	"scripts/a.py":   {"print('a')\n", "print('b')\n"},
	"scripts/b.py":   {"print('a')\n", "print('b')\n"},
	"models/m1.json": {`{"hidden_size": 64}`, `{"hidden_size": 128}`},
	"models/m2.json": {`{"hidden_size": 64}`, `{"hidden_size": 128}`},
}

// drawFiles draws the content of every file of idFiles.
func drawFiles(t *rapid.T) map[string]string {
	m := map[string]string{}
	for _, p := range slices.Sorted(maps.Keys(idFiles)) {
		m[p] = rapid.SampledFrom(idFiles[p]).Draw(t, "content of "+p)
	}
	return m
}

// idChoices lists the values a generated spec gives each key other than the
// integer ones (those range from the key's minimum): several per key, so two
// draws can differ in any one.
var idChoices = map[field][]string{
	fModel:      {"tiny", "llama-1b", "models/m1.json", "models/m2.json"},
	fHardware:   {"cpu", "h100-sxm", "auto"},
	fBackend:    {"sim", "gotrain", "torchrun"},
	fWrapPolicy: {"transformer", "size:100M", "size:1000"},
	fTimeout:    {"10m", "1h"},
	fName:       {"p", "q"},
}

// idOptions are the backend options a generated spec may give once for the
// sweep, with the values it chooses from: the program options, and engine
// settings the ID leaves out.
var idOptions = []struct {
	name string
	vals []string
}{
	{"launcher", []string{"torchrun", "python", "accelerate"}},
	{"script", []string{"scripts/a.py", "scripts/b.py"}},
	{"command", []string{`[deepspeed, "{script_args}"]`, `[composer, "{script_args}"]`}},
	{"args", []string{"[--n=4]", "[--n=8]"}},
	{"extra_args", []string{"[--x]", "[--y]"}},
	{"lr", []string{"0.1", "0.2"}},
	{"python", []string{"python3", "python3.11"}},
}

// idEnvValues are env values, UTF-8 that a byte-level bug would merge among
// them ("\u00ff\u00fe" and "\u00fe\u00ff").
var idEnvValues = []string{`"1"`, `"x y"`, `"é"`, `"\u00ff\u00fe"`, `"\u00fe\u00ff"`, `""`}

// drawValue draws a value for key d.
func drawValue(t *rapid.T, d *keyDef, label string) string {
	if c := idChoices[d.f]; len(c) > 0 {
		return rapid.SampledFrom(c).Draw(t, label)
	}
	switch d.kind {
	case kindInt:
		return strconv.FormatInt(rapid.Int64Range(d.min, min(d.min+3, d.max)).Draw(t, label), 10)
	case kindBool:
		return strconv.FormatBool(rapid.Bool().Draw(t, label))
	case kindEnum:
		return rapid.SampledFrom(d.values).Draw(t, label)
	}
	panic("no values for key " + d.name + ": give it idChoices")
}

// drawSpec generates a spec over every key the spec accepts. world_size and
// global_batch are derived from the other axes here (given too, they must
// agree); TestIDFieldsClassified changes them directly.
func drawSpec(t *rapid.T) idSpec {
	var s idSpec
	for i := range keyDefs {
		d := &keyDefs[i]
		if d.f == fWorldSize || d.f == fGlobalBatch || !rapid.Bool().Draw(t, "give "+d.name) {
			continue
		}
		e := kv{d.name, drawValue(t, d, d.name)}
		if d.where&inBase != 0 {
			s.base = append(s.base, e)
		} else {
			s.top = append(s.top, e)
		}
	}
	for _, name := range []string{"A", "B_C"} {
		if rapid.Bool().Draw(t, "env "+name) {
			s.env = append(s.env, kv{name, rapid.SampledFrom(idEnvValues).Draw(t, "env "+name+" value")})
		}
	}
	for _, o := range idOptions {
		if rapid.Bool().Draw(t, "option "+o.name) {
			s.opts = append(s.opts, kv{o.name, rapid.SampledFrom(o.vals).Draw(t, "option "+o.name+" value")})
		}
	}
	if rapid.Bool().Draw(t, "option axis") {
		s.optAxis = &kv{"backend_options.fsdp_api", rapid.SampledFrom([]string{"1", "2"}).Draw(t, "option axis value")}
	}
	if rapid.Bool().Draw(t, "launcher options") {
		s.lopts = append(s.lopts, kv{"partition", rapid.SampledFrom([]string{"a", "b"}).Draw(t, "partition")})
	}
	s.search = rapid.Bool().Draw(t, "search")
	s.files = drawFiles(t)
	return s
}

// mutate changes one thing of s (or nothing): a key's value, a key given or
// dropped, an env variable, an option, the option axis, the search.
func mutate(t *rapid.T, s idSpec) idSpec {
	out := idSpec{top: slices.Clone(s.top), base: slices.Clone(s.base), env: slices.Clone(s.env), opts: slices.Clone(s.opts),
		lopts: slices.Clone(s.lopts), optAxis: s.optAxis, search: s.search, files: s.files}
	edit := func(kvs []kv, label string, redraw func(k string) string) []kv {
		if len(kvs) == 0 {
			return kvs
		}
		i := rapid.IntRange(0, len(kvs)-1).Draw(t, label+" index")
		if rapid.Bool().Draw(t, label+" drop") {
			return slices.Delete(kvs, i, i+1)
		}
		kvs[i].v = redraw(kvs[i].k)
		return kvs
	}
	switch rapid.IntRange(0, 7).Draw(t, "mutation") {
	case 0: // nothing
	case 1:
		out.base = edit(out.base, "base", func(k string) string { return drawValue(t, keyByName[k], "new "+k) })
	case 2:
		out.top = edit(out.top, "top", func(k string) string { return drawValue(t, keyByName[k], "new "+k) })
	case 3:
		out.env = edit(out.env, "env", func(string) string { return rapid.SampledFrom(idEnvValues).Draw(t, "new env value") })
	case 4:
		out.opts = edit(out.opts, "option", func(k string) string {
			for _, o := range idOptions {
				if o.name == k {
					return rapid.SampledFrom(o.vals).Draw(t, "new "+k)
				}
			}
			return ""
		})
	case 5:
		out.lopts = nil
		out.optAxis = nil
	case 6:
		out.search = !out.search
	case 7:
		out.files = drawFiles(t)
	}
	return out
}

// readKey is what a run reads of rc, by reflection: every field but those
// notInID lists, with the fields idPartly lists cut to the part the run
// reads, and the content of the files it opens (read here, not taken from
// InputHashes, which the code under test computes). Two runs whose readKeys
// are equal do the same work.
func readKey(rc RunConfig) map[string]any {
	w := rc.asWritten()
	v := reflect.ValueOf(w)
	out := map[string]any{}
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		if _, out := notInID[name]; out {
			continue
		}
		f := v.Field(i)
		if (f.Kind() == reflect.Map || f.Kind() == reflect.Slice) && f.Len() == 0 {
			out[name] = nil // absent and empty read alike
			continue
		}
		out[name] = f.Interface()
	}
	if !w.Checkpoints() {
		out["Checkpoint"], out["CheckpointEvery"], out["ResumeCheck"] = nil, nil, nil
	}
	opts := map[string]any{}
	for _, k := range rc.OptionAxes {
		opts[k] = w.BackendOptions[k]
	}
	if rc.hasProgram() {
		for _, k := range programOptions {
			if x, ok := w.BackendOptions[k]; ok {
				opts[k] = x
			}
		}
	}
	out["BackendOptions"], out["SpecPaths"] = opts, nil // SpecPaths: folded into the written values
	out["InputHashes"] = nil
	script, _ := rc.BackendOptions["script"].(string)
	for name, path := range map[string]string{"script content": script, "model content": rc.Model} {
		if b, err := os.ReadFile(path); err == nil && path != "" {
			out[name] = string(b)
		}
	}
	return out
}

// loadIDSpec writes s and its files into a new folder under parent and loads
// it from elsewhere, as cmd/fsdpbench does (paths resolve against the spec's
// folder).
func loadIDSpec(parent string, s idSpec) (*Plan, error) {
	path, err := writeIDSpec(parent, s)
	if err != nil {
		return nil, err
	}
	return loadIDPath(path)
}

// writeIDSpec writes s and its files into a new folder under parent and
// returns the spec's path.
func writeIDSpec(parent string, s idSpec) (string, error) {
	dir, err := os.MkdirTemp(parent, "spec")
	if err != nil {
		return "", err
	}
	for p, body := range s.files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(path, []byte(s.render()), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// loadIDPath loads a spec as cmd/fsdpbench does.
func loadIDPath(path string) (*Plan, error) {
	return Load(path, Options{PathOptions: []string{"backend_options.script"}, ProgramOptions: []string{"backend_options.python", "backend_options.command"}})
}

// TestPropertyIDsSeparateWhatRunsRead: over generated specs and one change to
// each, the first runs' IDs are equal exactly when what the runs read is.
// A failure names the two specs (rapid shrinks them to the smallest pair).
func TestPropertyIDsSeparateWhatRunsRead(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(t.TempDir()) // paths resolve against the spec's folder, not here
	// rapid's 100 checks (20 under -short) take about a second; it stops
	// early, passing, when the test's deadline nears.
	rapid.Check(t, func(t *rapid.T) {
		a := drawSpec(t)
		b := mutate(t, a)
		pa, errA := loadIDSpec(dir, a)
		pb, errB := loadIDSpec(dir, b)
		if errA != nil || errB != nil {
			t.Skip("a combination the spec refuses") // e.g. checkpoint_every past steps
		}
		ra, rb := pa.Runs[0], pb.Runs[0]
		ka, kb := readKey(ra), readKey(rb)
		sameRead := reflect.DeepEqual(ka, kb)
		if sameRead != (ra.ID == rb.ID) {
			var diff []string
			for k := range ka {
				if !reflect.DeepEqual(ka[k], kb[k]) {
					diff = append(diff, fmt.Sprintf("%s: %v vs %v", k, ka[k], kb[k]))
				}
			}
			slices.Sort(diff)
			t.Fatalf("reads the same: %v, same ID: %v (%s, %s); differs in %v\nspec A:\n%s\nspec B:\n%s",
				sameRead, ra.ID == rb.ID, ra.ID, rb.ID, diff, a.render(), b.render())
		}
	})
}

// idBase is a config that gives every field a value, checkpoints and starts a
// script of the user's, so that a change to any field is one a run reads
// unless notInID says otherwise.
func idBase() RunConfig {
	rc := goldenConfig()
	rc.Checkpoint, rc.CheckpointEvery, rc.ResumeCheck = CheckpointSharded, 5, true
	rc.BackendOptions = map[string]any{"script": "/abs/train.py", "fsdp_api": int64(1), "lr": 0.1}
	rc.LauncherOptions = map[string]any{"partition": "a"}
	rc.Env = map[string]string{"A": "1"}
	rc.InputHashes = map[string]string{"backend_options.script": "aa"}
	rc.OptionAxes = []string{"fsdp_api"}
	rc.SpecPaths = map[string]any{"backend_options.script": "train.py"}
	rc.Search, rc.SearchGroup = "batch_per_device", "g"
	rc.RepeatsMin, rc.RepeatsCI = 2, 0.05
	return rc
}

// changeField changes field f of rc to another value of its type, in a way a
// run reads where the field is read (for idPartly's fields, the read part).
func changeField(t *testing.T, rc *RunConfig, name string) {
	f := reflect.ValueOf(rc).Elem().FieldByName(name)
	switch name {
	case "BackendOptions":
		rc.BackendOptions = maps.Clone(rc.BackendOptions)
		rc.BackendOptions["fsdp_api"] = int64(2) // an option axis
		return
	case "SpecPaths":
		rc.SpecPaths = map[string]any{"backend_options.script": "other/train.py"}
		return
	case "OptionAxes":
		rc.OptionAxes = []string{"fsdp_api", "lr"}
		return
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Int, reflect.Int64:
		f.SetInt(f.Int() + 1)
	case reflect.Float64:
		f.SetFloat(f.Float() + 0.5)
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		for _, k := range f.MapKeys() {
			m.SetMapIndex(k, f.MapIndex(k))
		}
		m.SetMapIndex(reflect.ValueOf("ZZ"), reflect.Zero(f.Type().Elem()))
		f.Set(m)
	default:
		t.Fatalf("RunConfig.%s is a %s: teach changeField to change it", name, f.Kind())
	}
}

// TestIDFieldsClassified checks notInID and idPartly by reflection: they name
// fields RunConfig has; changing a field notInID lists keeps the ID; changing
// any other field changes it. A field added to RunConfig fails here until it
// enters the ID or is listed with why.
func TestIDFieldsClassified(t *testing.T) {
	typ := reflect.TypeOf(RunConfig{})
	for _, list := range []map[string]string{notInID, idPartly} {
		for name, why := range list {
			_, ok := typ.FieldByName(name)
			assert.True(t, ok, "%s names no field of RunConfig", name)
			assert.NotEmpty(t, why, name)
		}
	}
	base := idBase()
	base.AssignID()
	for i := 0; i < typ.NumField(); i++ {
		name := typ.Field(i).Name
		rc := idBase()
		changeField(t, &rc, name)
		rc.AssignID()
		if _, skip := notInID[name]; skip {
			assert.Equal(t, base.ID, rc.ID, "RunConfig.%s is listed as not in the ID (%s), but changing it changed the ID", name, notInID[name])
		} else {
			assert.NotEqual(t, base.ID, rc.ID, "changing RunConfig.%s, which a run reads, kept the ID; put it in the ID or list it in notInID with why", name)
		}
	}
	// The parts of idPartly's fields a run does not read keep the ID.
	noCheckpoint := func(rc *RunConfig) { rc.Checkpoint = CheckpointNone }
	for _, c := range []struct {
		name         string
		both, change func(*RunConfig)
	}{
		{"CheckpointEvery without checkpoints", noCheckpoint, func(rc *RunConfig) { rc.CheckpointEvery = 9 }},
		{"ResumeCheck without checkpoints", noCheckpoint, func(rc *RunConfig) { rc.ResumeCheck = !rc.ResumeCheck }},
		{"an option given once for the sweep", nil, func(rc *RunConfig) {
			rc.BackendOptions = maps.Clone(rc.BackendOptions)
			rc.BackendOptions["lr"] = 0.2
		}},
		{"the script's path as resolved (its written form is in SpecPaths)", nil, func(rc *RunConfig) {
			rc.BackendOptions = maps.Clone(rc.BackendOptions)
			rc.BackendOptions["script"] = "/elsewhere/train.py"
		}},
		{"a SpecPaths entry for no path", nil, func(rc *RunConfig) {
			rc.SpecPaths = map[string]any{"backend_options.script": "train.py", "x": "y"}
		}},
	} {
		a, b := idBase(), idBase()
		if c.both != nil {
			c.both(&a)
			c.both(&b)
		}
		c.change(&b)
		a.AssignID()
		b.AssignID()
		assert.Equal(t, a.ID, b.ID, c.name)
	}
}

// TestPropertyIDsHoldForGeneratedConfigs: the ID is a function of the
// config (equal configs, equal IDs, also through run_args.json's JSON), as
// the golden tests pin it across versions.
func TestPropertyIDsHoldForGeneratedConfigs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(t.TempDir())
	rapid.Check(t, func(t *rapid.T) {
		path, err := writeIDSpec(dir, drawSpec(t))
		require.NoError(t, err)
		p1, err1 := loadIDPath(path)
		p2, err2 := loadIDPath(path)
		require.Equal(t, err1 == nil, err2 == nil)
		if err1 != nil {
			t.Skip("a combination the spec refuses")
		}
		for i := range p1.Runs {
			require.Equal(t, p1.Runs[i].ID, p2.Runs[i].ID)
			// As run_args.json stores it and the harness reads it back.
			b, err := json.Marshal(p1.Runs[i])
			require.NoError(t, err)
			var c RunConfig
			require.NoError(t, json.Unmarshal(b, &c))
			c.AssignID()
			require.Equal(t, p1.Runs[i].ID, c.ID, "the ID is the stored config's")
		}
	})
}

// envToken is a piece of a generated env value: as a YAML double-quoted
// string holds it, and what it means (ok false: it names no UTF-8 text).
type envToken struct {
	yaml, means string
	ok          bool
}

var envTokens = []envToken{
	{"x", "x", true}, {"é", "é", true}, {`\u00ff`, "\u00ff", true}, {`\u00fe`, "\u00fe", true},
	{`\\`, `\`, true}, {`\x41`, "A", true}, {"\xff", "", false}, {"\xfe", "", false}, {`\udc80`, "", false},
}

// TestPropertyEnvValuesReachRunsIntact (issue 37 §3): an env value a spec
// gives reaches the run as written, or the spec is refused; never altered
// (bytes that are not UTF-8 read as U+FFFD made two values one run ID).
// Through the file and through --set.
func TestPropertyEnvValuesReachRunsIntact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		toks := rapid.SliceOfN(rapid.SampledFrom(envTokens), 1, 4).Draw(t, "tokens")
		var yaml, want, raw strings.Builder
		valid := true
		for _, tk := range toks {
			yaml.WriteString(tk.yaml)
			want.WriteString(tk.means)
			valid = valid && tk.ok
			if tk.ok || !strings.HasPrefix(tk.yaml, `\`) {
				raw.WriteString(tk.yaml) // --set takes the text as it is, escapes and all
			}
		}
		plan, err := Parse([]byte("name: e\nenv: {A: \""+yaml.String()+"\"}\n"), "e.yaml", Options{})
		if valid != (err == nil) {
			t.Fatalf("env A: %q: valid %v, parse error %v", yaml.String(), valid, err)
		}
		if err == nil && plan.Runs[0].Env["A"] != want.String() {
			t.Fatalf("env A: %q reached the run as %q, not %q", yaml.String(), plan.Runs[0].Env["A"], want.String())
		}
		set := raw.String()
		plan, err = Parse([]byte("name: e\n"), "e.yaml", Options{Set: []string{"env.A=" + set}})
		if utf8Valid := utf8.ValidString(set); utf8Valid != (err == nil) && strings.TrimSpace(set) != "" {
			t.Fatalf("--set env.A=%q: valid %v, parse error %v", set, utf8Valid, err)
		}
		if err == nil && plan.Runs[0].Env["A"] != strings.TrimSpace(set) {
			t.Fatalf("--set env.A=%q reached the run as %q", set, plan.Runs[0].Env["A"])
		}
	})
}

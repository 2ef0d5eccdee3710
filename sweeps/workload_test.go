package sweeps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// findRun returns the run of plan with the slug and seq_len given.
func findRun(t *testing.T, plan *Plan, slug string, seqLen int) RunConfig {
	t.Helper()
	for _, rc := range plan.Runs {
		if rc.Slug == slug && rc.SeqLen == seqLen {
			return rc
		}
	}
	t.Fatalf("no run %s at seq_len %d", slug, seqLen)
	return RunConfig{}
}

// TestUserScriptsGetTheirOwnIDs is issue 37 §2 as written: nanoGPT under
// launcher: python with model: tiny as a label, the Go trainer's built-in
// tiny, and torchrun-user-script.yaml got one ID
// (ws1-bs4-ddp-ac0-pre-fp32-951a…), so compare paired them. Now each
// workload has its own; the Go trainer and the project's script on the
// built-in model still share theirs.
func TestUserScriptsGetTheirOwnIDs(t *testing.T) {
	nano := filepath.Join(t.TempDir(), "train.py")
	require.NoError(t, os.WriteFile(nano, []byte("# nanoGPT\n"), 0o644))
	opts := Options{PathOptions: []string{"backend_options.script"}, ProgramOptions: []string{"backend_options.python", "backend_options.command"}}
	load := func(name string, sets ...string) *Plan {
		t.Helper()
		o := opts
		o.Set = sets
		plan, err := Load(filepath.Join("examples", name), o)
		require.NoError(t, err)
		return plan
	}
	nanoPlan := load("nanogpt-cpu.yaml", "backend_options.script="+nano)
	userPlan, gotrainPlan := load("torchrun-user-script.yaml"), load("calibrate-cpu.yaml")

	const slug = "ws1-bs4-ddp-ac0-pre-fp32"
	nano64, nano128, user128 := findRun(t, nanoPlan, slug, 64), findRun(t, nanoPlan, slug, 128), findRun(t, userPlan, slug, 128)
	gotrain64 := findRun(t, gotrainPlan, slug, 64)
	assert.Equal(t, "ws1-bs4-ddp-ac0-pre-fp32-951a7302a9f76bd1", gotrain64.ID, "runs of the built-in model keep their IDs")
	for _, c := range []struct {
		rc  RunConfig
		was string
	}{{nano64, gotrain64.ID}, {nano128, "ws1-bs4-ddp-ac0-pre-fp32-34278ca3daf47570"}, {user128, "ws1-bs4-ddp-ac0-pre-fp32-34278ca3daf47570"}} {
		old, changed := c.rc.OldWorkloadID()
		assert.True(t, changed)
		assert.Equal(t, c.was, old, "the ID %s had before", c.rc.Sweep)
		assert.NotEqual(t, c.was, c.rc.ID)
	}
	assert.NotEqual(t, nano128.ID, user128.ID, "two user scripts, two IDs")
	assert.Len(t, user128.InputHashes["backend_options.script"], 64, "the example's script is hashed")

	// Engines running the same built-in model still share IDs.
	const spec = "name: builtin\nbackend: %s\nhardware: cpu\nmodel: tiny\nseq_len: 64\nsteps: 20\nbase: {world_size: 1, batch_per_device: 4, sharding: ddp, mixed_precision: fp32}\n"
	torchrun, err := Parse([]byte(strings.Replace(spec, "%s", "torchrun", 1)+"backend_options: {launcher: accelerate}\n"), "t.yaml", opts)
	require.NoError(t, err)
	assert.Equal(t, gotrain64.ID, torchrun.Runs[0].ID, "engines running the same built-in model share IDs")

	// Compare and gate say what paired runs differ in.
	assert.Equal(t, []string{"backend: \"gotrain\" vs \"torchrun\"", "backend_options.launcher: none vs \"accelerate\""},
		Differences(&gotrain64, &torchrun.Runs[0]))
	d := Differences(&gotrain64, &nano64)
	assert.Contains(t, d, "backend_options.launcher: none vs \"python\"")
	assert.Contains(t, d, "backend_options.script: none vs "+q(nano))
	assert.Empty(t, Differences(&nano64, &nano64))
}

// TestScriptIDHashesContentAndWrittenPath: a user script's ID holds its path
// as the spec wrote it and its content. Editing the file names new runs; the
// spec and its files copied elsewhere (another machine, another checkout)
// name the same ones.
func TestScriptIDHashesContentAndWrittenPath(t *testing.T) {
	spec := "name: s\nbackend: torchrun\nhardware: cpu\nbackend_options: {script: scripts/train.py, args: [--n_layer=4]}\n"
	files := map[string]string{"spec.yaml": spec, "scripts/train.py": "print(1)\n"}
	load := func(root string, sets ...string) RunConfig {
		t.Helper()
		t.Chdir(t.TempDir()) // not the spec's folder: paths resolve against it
		plan, err := Load(filepath.Join(root, "spec.yaml"), Options{PathOptions: []string{"backend_options.script"}, Set: sets})
		require.NoError(t, err)
		return plan.Runs[0]
	}
	a := load(writeTree(t, files))
	assert.Equal(t, "scripts/train.py", a.SpecPaths["backend_options.script"])
	assert.Len(t, a.InputHashes["backend_options.script"], 64)
	assert.Equal(t, a.ID, load(writeTree(t, files)).ID, "the same files elsewhere: the same run")

	edited := map[string]string{"spec.yaml": spec, "scripts/train.py": "print(2)\n"}
	assert.NotEqual(t, a.ID, load(writeTree(t, edited)).ID, "another content: another run")

	moved := map[string]string{"spec.yaml": strings.Replace(spec, "scripts/train.py", "other/train.py", 1), "other/train.py": "print(1)\n"}
	assert.NotEqual(t, a.ID, load(writeTree(t, moved)).ID, "another path: another run")

	root := writeTree(t, files)
	assert.NotEqual(t, a.ID, load(root, "backend_options.args=[--n_layer=8]").ID, "other arguments: another run")

	// A command is part of the ID as written.
	cmd := func(c string) RunConfig {
		plan, err := Parse([]byte("name: c\nbackend: torchrun\nbackend_options: {launcher: command, command: ["+c+", \"{script_args}\"]}\n"), "c.yaml", Options{})
		require.NoError(t, err)
		return plan.Runs[0]
	}
	assert.NotEqual(t, cmd("deepspeed").ID, cmd("composer").ID)
	assert.Equal(t, cmd("deepspeed").ID, cmd("deepspeed").ID)
}

// TestModelFileContentInID: a model axis naming a config.json hashes the
// file's content: two files of one name in two folders, or a file edited
// between sweeps, are two models.
func TestModelFileContentInID(t *testing.T) {
	spec := "name: m\nmodel: models/m.json\n"
	load := func(cfg string) RunConfig {
		root := writeTree(t, map[string]string{"spec.yaml": spec, "models/m.json": cfg})
		plan, err := Load(filepath.Join(root, "spec.yaml"), Options{})
		require.NoError(t, err)
		return plan.Runs[0]
	}
	a, b := load(`{"hidden_size": 64}`), load(`{"hidden_size": 128}`)
	assert.NotEqual(t, a.ID, b.ID)
	assert.Equal(t, a.ID, load(`{"hidden_size": 64}`).ID)
	assert.Contains(t, Differences(&a, &b)[0], "the model's config.json content: sha256 ")
	// A model file that is not there (the model check names it) hashes its path.
	plan, err := Parse([]byte(spec), "m.yaml", Options{Dir: t.TempDir()})
	require.NoError(t, err)
	assert.Empty(t, plan.Runs[0].InputHashes)
}

// TestUnreadableScriptRefused: content hashing reads a bounded regular file;
// anything else is refused at the option, naming the file.
func TestUnreadableScriptRefused(t *testing.T) {
	root := writeTree(t, map[string]string{"dir/x": ""})
	big := filepath.Join(root, "big.py")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxScriptBytes+1))
	require.NoError(t, f.Close())
	for path, want := range map[string]string{
		filepath.Join(root, "dir"): "must be a regular file",
		big:                        "more than the 16.0 MiB",
	} {
		_, err := Parse([]byte("name: u\nbackend: torchrun\nbackend_options:\n  script: "+path+"\n"), "u.yaml", Options{})
		require.Error(t, err, path)
		assert.Contains(t, err.Error(), "u.yaml:4:11: backend_options.script "+q(path)+": ")
		assert.Contains(t, err.Error(), want)
	}
	// A script that is not there is the backend's to name; the ID hashes its path.
	plan, err := Parse([]byte("name: u\nbackend: torchrun\nbackend_options: {script: "+filepath.Join(root, "missing.py")+"}\n"), "u.yaml", Options{})
	require.NoError(t, err)
	assert.Empty(t, plan.Runs[0].InputHashes)
}

// TestStoredBeforeWorkloadIDs: a config stored with the ID a run of a user
// script had before issue 37 is recognized, so a gate can say the IDs changed
// rather than call the run missing; a run of the built-in model is not.
func TestStoredBeforeWorkloadIDs(t *testing.T) {
	rc := goldenConfig()
	rc.Backend = "torchrun"
	rc.BackendOptions = map[string]any{"script": "train.py"}
	old, changed := rc.OldWorkloadID()
	require.True(t, changed)
	rc.AssignID()
	assert.NotEqual(t, old, rc.ID)
	assert.False(t, rc.StoredBeforeWorkloadIDs())
	stored := rc
	stored.ID = old
	assert.True(t, stored.StoredBeforeWorkloadIDs())

	g := goldenConfig()
	g.AssignID()
	id, changed := g.OldWorkloadID()
	assert.False(t, changed)
	assert.Equal(t, g.ID, id)
	assert.False(t, g.StoredBeforeWorkloadIDs())

	m := goldenConfig()
	m.Model = "models/m.json"
	m.AssignID() // no hash: as stored before
	assert.True(t, m.StoredBeforeWorkloadIDs())
}

// TestWorkloadGoldenID pins the ID of a run of a user's script, as
// TestGoldenID pins a run of the built-in model: the workload part of the key
// cannot change without this test saying so.
func TestWorkloadGoldenID(t *testing.T) {
	rc := goldenConfig()
	rc.Backend = "torchrun"
	rc.BackendOptions = map[string]any{"script": "/home/u/train.py", "args": []any{"--n_layer=4"}, "launcher": "python", "lr": 0.1}
	rc.SpecPaths = map[string]any{"backend_options.script": "train.py"}
	rc.InputHashes = map[string]string{"backend_options.script": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"}
	rc.AssignID()
	assert.Equal(t, "ws8-bs4-full_shard-ac0-pre-8cc1b5b26a0f5bc9", rc.ID)
	old, _ := rc.OldWorkloadID()
	assert.Equal(t, "ws8-bs4-full_shard-ac0-pre-bcf429385997cf48", old, "before issue 37: the built-in model's ID")
}

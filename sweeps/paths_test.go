package sweeps

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeTree writes files (path: content) under a new temporary folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(body), 0o644))
	}
	return root
}

const pathsSpec = `name: paths
model: models/m/config.json
grid:
  world_size: [1, 2]
backend_options:
  script: train.py
  nccl_tests: [nccl/ag.txt, nccl/missing.txt]
  python: python3
  command: [bin/run.sh, data/input.txt]
  args: [train.py]
`

var pathOpts = Options{
	PathOptions:    []string{"backend_options.script", "backend_options.nccl_tests"},
	ProgramOptions: []string{"backend_options.python", "backend_options.command"},
}

// TestSpecPathsResolveAgainstTheSpecFile: a spec's relative paths open relative to
// the spec's folder, whatever the current directory (issue 25), while run IDs,
// fingerprints and the resolved spec keep the values as written, so results
// stored before stay done.
func TestSpecPathsResolveAgainstTheSpecFile(t *testing.T) {
	root := writeTree(t, map[string]string{
		"specs/spec.yaml":            pathsSpec,
		"specs/models/m/config.json": "{}",
		"specs/train.py":             "",
		"specs/nccl/ag.txt":          "",
		"specs/bin/run.sh":           "",
		"specs/data/input.txt":       "",
	})
	dir := filepath.Join(root, "specs")
	var checked []string
	opts := pathOpts
	opts.CheckModel = func(m string) error {
		checked = append(checked, m)
		if _, err := os.Stat(m); err != nil && strings.Contains(m, "/") {
			return err
		}
		return nil
	}
	t.Chdir(t.TempDir()) // anywhere but the spec's folder
	plan, err := Load(filepath.Join(dir, "spec.yaml"), opts)
	require.NoError(t, err)
	assert.Empty(t, plan.Warnings)
	require.Len(t, plan.Runs, 2)
	rc := plan.Runs[0]
	assert.Equal(t, filepath.Join(dir, "models/m/config.json"), rc.Model)
	assert.Contains(t, checked, rc.Model, "the model is checked where it will be opened")
	assert.Equal(t, filepath.Join(dir, "train.py"), rc.BackendOptions["script"])
	// A missing file stays as written: the backend names it.
	assert.Equal(t, []any{filepath.Join(dir, "nccl/ag.txt"), "nccl/missing.txt"}, rc.BackendOptions["nccl_tests"])
	assert.Equal(t, "python3", rc.BackendOptions["python"], "a bare program is looked up on PATH")
	assert.Equal(t, []any{filepath.Join(dir, "bin/run.sh"), "data/input.txt"}, rc.BackendOptions["command"], "a command's arguments are its own")
	assert.Equal(t, []any{"train.py"}, rc.BackendOptions["args"], "not a path option")
	assert.Equal(t, "models/m/config.json", rc.SpecPaths["model"])
	assert.Contains(t, string(plan.Resolved), "model: models/m/config.json")
	assert.Contains(t, string(plan.Resolved), "script: train.py")

	// The same spec read as written (from its folder, as before paths were
	// resolved) names the same runs with the same fingerprints. The IDs hash
	// the script's and the model's content (issue 37), so it is read where
	// those files are.
	data, err := os.ReadFile(filepath.Join(dir, "spec.yaml"))
	require.NoError(t, err)
	t.Chdir(dir)
	asWritten, err := Parse(data, "spec.yaml", Options{})
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	for i := range plan.Runs {
		assert.Equal(t, asWritten.Runs[i].ID, plan.Runs[i].ID)
		assert.Equal(t, asWritten.Runs[i].Fingerprint(), plan.Runs[i].Fingerprint())
		assert.Equal(t, asWritten.Runs[i].SearchGroup, plan.Runs[i].SearchGroup)
	}
	// So does the run as stored in run_args.json and read back.
	b, err := json.Marshal(rc)
	require.NoError(t, err)
	var stored RunConfig
	require.NoError(t, json.Unmarshal(b, &stored))
	assert.Equal(t, rc.Fingerprint(), stored.Fingerprint())
	stored.AssignID()
	assert.Equal(t, rc.ID, stored.ID)
	// A search point derived from a resolved run keeps the ID scheme.
	rc.Search = "batch_per_device"
	next, ok := NextSearchPoint(rc)
	require.True(t, ok)
	want := asWritten.Runs[0]
	want.Search = "batch_per_device"
	wantNext, _ := NextSearchPoint(want)
	assert.Equal(t, wantNext.ID, next.ID)
}

// TestSetPathsStayRelativeToTheCurrentDirectory: --set values are typed where
// the user is, so they are not resolved against the spec.
func TestSetPathsStayRelativeToTheCurrentDirectory(t *testing.T) {
	root := writeTree(t, map[string]string{
		"specs/spec.yaml":            pathsSpec,
		"specs/models/m/config.json": "{}",
		"specs/other.py":             "",
		"here/models/x/config.json":  "{}",
	})
	t.Chdir(filepath.Join(root, "here"))
	opts := pathOpts
	opts.Set = []string{"model=models/x/config.json", "backend_options.script=other.py"}
	plan, err := Load(filepath.Join(root, "specs", "spec.yaml"), opts)
	require.NoError(t, err)
	rc := plan.Runs[0]
	assert.Equal(t, "models/x/config.json", rc.Model)
	assert.Equal(t, "other.py", rc.BackendOptions["script"])
	assert.NotContains(t, rc.SpecPaths, "model")
	assert.NotContains(t, rc.SpecPaths, "backend_options.script")
}

// TestCwdRelativeSpecPathWarns: a spec written for the current directory (as
// paths read before) still runs, with a warning saying how to write the path.
func TestCwdRelativeSpecPathWarns(t *testing.T) {
	root := writeTree(t, map[string]string{
		"specs/spec.yaml":            "name: old\nmodel: specs/models/m/config.json\n",
		"specs/models/m/config.json": "{}",
	})
	t.Chdir(root)
	plan, err := Load(filepath.Join("specs", "spec.yaml"), Options{})
	require.NoError(t, err)
	assert.Equal(t, "specs/models/m/config.json", plan.Runs[0].Model)
	require.Len(t, plan.Warnings, 1)
	assert.Contains(t, plan.Warnings[0], `specs/spec.yaml:2:8: model "specs/models/m/config.json" is found relative to the current directory`)
	assert.Contains(t, plan.Warnings[0], `write "models/m/config.json"`)
}

// TestHardwareFilePathResolvesAgainstTheSpecFile: hardware: ./my-gpu.yaml (a
// user-defined profile, issue 26) opens relative to the spec's folder as model:
// does, is checked there, sizes nodes there, and the IDs keep it as written.
func TestHardwareFilePathResolvesAgainstTheSpecFile(t *testing.T) {
	root := writeTree(t, map[string]string{
		"specs/spec.yaml":        "name: hw\nhardware: ./gpus/my-gpu.yaml\nmodel: tiny\ngrid:\n  world_size: [8, 16]\n",
		"specs/gpus/my-gpu.yaml": "x: 1\n",
	})
	dir := filepath.Join(root, "specs")
	want := filepath.Join(dir, "gpus/my-gpu.yaml")
	var checked, sized []string
	opts := Options{
		CheckHardware: func(h string) error { checked = append(checked, h); _, err := os.Stat(h); return err },
		GPUsPerNode: func(h string) int {
			sized = append(sized, h)
			if h == want {
				return 8
			}
			return 0
		},
	}
	t.Chdir(t.TempDir())
	plan, err := Load(filepath.Join(dir, "spec.yaml"), opts)
	require.NoError(t, err)
	require.Len(t, plan.Runs, 2)
	assert.Equal(t, []string{want}, checked)
	assert.Contains(t, sized, want)
	assert.Equal(t, want, plan.Runs[0].Hardware)
	assert.Equal(t, "./gpus/my-gpu.yaml", plan.Runs[0].SpecPaths["hardware"])
	assert.Equal(t, 2, plan.Runs[1].Nodes, "16 GPUs split into nodes of the file's 8")

	data, err := os.ReadFile(filepath.Join(dir, "spec.yaml"))
	require.NoError(t, err)
	asWritten, err := Parse(data, "spec.yaml", Options{})
	require.NoError(t, err)
	assert.Equal(t, asWritten.Runs[0].ID, plan.Runs[0].ID)
	assert.Equal(t, asWritten.Runs[0].Fingerprint(), plan.Runs[0].Fingerprint())
}

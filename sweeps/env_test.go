package sweeps

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envSpec = `name: envt
backend: gotrain
env: {NCCL_DEBUG: INFO}
base: {world_size: 2}
grid:
  backend_options.transport: [shm, tcp]
  env.OMP_NUM_THREADS: [1, 2]
`

// TestEnvAxes checks env: and the env.NAME and backend_options.NAME axes: each
// point gets its values, distinct IDs, and the axes are listed.
func TestEnvAxes(t *testing.T) {
	plan, err := Parse([]byte(envSpec), "s.yaml", Options{})
	require.NoError(t, err)
	require.Len(t, plan.Runs, 4)
	assert.Equal(t, []string{"backend_options.transport", "env.OMP_NUM_THREADS"}, plan.Axes)
	ids := map[string]bool{}
	var got []string
	for _, rc := range plan.Runs {
		ids[rc.ID] = true
		assert.Equal(t, "INFO", rc.Env["NCCL_DEBUG"])
		assert.Equal(t, []string{"transport"}, rc.OptionAxes)
		got = append(got, rc.BackendOptions["transport"].(string)+"/"+rc.Env["OMP_NUM_THREADS"])
	}
	assert.Equal(t, []string{"shm/1", "shm/2", "tcp/1", "tcp/2"}, got)
	assert.Len(t, ids, 4, "every point has its own ID")

	// The resolved spec parses to the same runs.
	again, err := Parse(plan.Resolved, "sweep.yaml", Options{})
	require.NoError(t, err)
	for i := range plan.Runs {
		assert.Equal(t, plan.Runs[i].ID, again.Runs[i].ID)
		assert.Equal(t, plan.Runs[i].Fingerprint(), again.Runs[i].Fingerprint())
	}
}

// TestEnvKeepsIDs: a spec without env or option axes keeps its IDs, and a run
// with env gets a different one.
func TestEnvKeepsIDs(t *testing.T) {
	const plain = "name: a\nbase: {world_size: 2}\nbackend_options: {efficiency: 0.5}\n"
	p1, err := Parse([]byte(plain), "s.yaml", Options{})
	require.NoError(t, err)
	// Computed by the code before env existed (commit a50c99a).
	assert.Equal(t, "ws2-bs1-full_shard-ac0-pre-a98470fcc7f5cc97", p1.Runs[0].ID)
	p2, err := Parse([]byte(plain), "s.yaml", Options{Set: []string{"env.NCCL_ALGO=Ring"}})
	require.NoError(t, err)
	assert.NotEqual(t, p1.Runs[0].ID, p2.Runs[0].ID)
	assert.NotEqual(t, p1.Runs[0].Fingerprint(), p2.Runs[0].Fingerprint())
	assert.Equal(t, map[string]string{"NCCL_ALGO": "Ring"}, p2.Runs[0].Env)
}

// TestEnvSet: --set env.X=a,b doubles the runs; backend_options.X=a,b makes an
// axis; backend_options.X=[a,b] stays one list value.
func TestEnvSet(t *testing.T) {
	const spec = "name: a\nbase: {world_size: 2}\ngrid: {sharding: [full_shard, ddp]}\n"
	p, err := Parse([]byte(spec), "s.yaml", Options{Set: []string{"env.NCCL_ALGO=Ring,Tree"}})
	require.NoError(t, err)
	assert.Len(t, p.Runs, 4)
	assert.Equal(t, []string{"sharding", "env.NCCL_ALGO"}, p.Axes)
	p, err = Parse([]byte(spec), "s.yaml", Options{Set: []string{"backend_options.efficiency=0.3,0.5"}})
	require.NoError(t, err)
	assert.Len(t, p.Runs, 4)
	assert.Equal(t, 0.3, p.Runs[0].BackendOptions["efficiency"])
	p, err = Parse([]byte(spec), "s.yaml", Options{Set: []string{"backend_options.args=[a,b]"}})
	require.NoError(t, err)
	assert.Len(t, p.Runs, 2)
	assert.Equal(t, []any{"a", "b"}, p.Runs[0].BackendOptions["args"])
	// One value replaces the grid axis.
	p, err = Parse([]byte(envSpec), "s.yaml", Options{Set: []string{"env.OMP_NUM_THREADS=4"}})
	require.NoError(t, err)
	assert.Len(t, p.Runs, 2)
	assert.Equal(t, "4", p.Runs[0].Env["OMP_NUM_THREADS"])
}

// TestEnvIncludeExclude: env in include entries (mapping and dotted) and
// exclude matching on env and option axes.
func TestEnvIncludeExclude(t *testing.T) {
	spec := envSpec + `exclude:
  - {backend_options.transport: tcp, env.OMP_NUM_THREADS: "2"}
include:
  - {env: {NCCL_ALGO: Tree}, backend_options.transport: shm}
`
	p, err := Parse([]byte(spec), "s.yaml", Options{})
	require.NoError(t, err)
	require.Len(t, p.Runs, 4)
	last := p.Runs[3]
	assert.Equal(t, "Tree", last.Env["NCCL_ALGO"])
	assert.Equal(t, "INFO", last.Env["NCCL_DEBUG"])
	assert.Contains(t, p.Axes, "env.NCCL_ALGO")
}

// TestEnvRefusals: bad names, harness-owned variables, values over the bound
// and conflicts are refused at file:line:col.
func TestEnvRefusals(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"name: a\nenv: {nccl_debug: INFO}\n", "s.yaml:2:7: environment variable name \"nccl_debug\" must be upper-case"},
		{"name: a\nenv: {MASTER_PORT: \"1\"}\n", "s.yaml:2:7: MASTER_PORT belongs to the harness"},
		{"name: a\ngrid: {env.RANK: [\"0\", \"1\"]}\n", "s.yaml:2:8: RANK belongs to the harness"},
		{"name: a\nbase: {env: {FSDPBENCH_RUN_ID: x}}\n", "s.yaml:2:14: FSDPBENCH_RUN_ID belongs to the harness"},
		{"name: a\nenv: {X: " + strings.Repeat("v", MaxEnvValue+1) + "}\n", "s.yaml:2:10: env X: the value is 4097 bytes, more than 4096"},
		{"name: a\nenv: {X: [a, b]}\n", "s.yaml:2:10: env X has a list"},
		{"name: a\nenv: {X: a}\ngrid: {env.X: [a, b]}\n", "s.yaml:3:8: env.X is a grid axis and also has one value at 2:10"},
		{"name: a\nbackend_options: {t: a}\ngrid: {backend_options.t: [a, b]}\n", "s.yaml:3:8: backend_options.t is a grid axis and also has one value"},
		{"name: a\ngrid: {backend_options.t: [[a], b]}\n", "s.yaml:2:28: backend_options.t must be one value"},
	} {
		_, err := Parse([]byte(c.spec), "s.yaml", Options{})
		if assert.Error(t, err, c.spec) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	_, err := Parse([]byte("name: a\n"), "s.yaml", Options{Set: []string{"env.WORLD_SIZE=4"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--set:1:1: WORLD_SIZE belongs to the harness")
}

// TestPathOptionIsNoAxis: an option naming a file cannot be an axis (IDs hash
// paths as written, relative to the spec).
func TestPathOptionIsNoAxis(t *testing.T) {
	_, err := Parse([]byte("name: a\ngrid: {backend_options.script: [a.py, b.py]}\n"), "s.yaml",
		Options{PathOptions: []string{"backend_options.script"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "s.yaml:2:8: backend_options.script names a file and cannot be an axis")
}

// TestEnvInBase: base takes env: and env.NAME; --set replaces either.
func TestEnvInBase(t *testing.T) {
	const spec = "name: a\nbase: {world_size: 2, env: {NCCL_ALGO: Ring}, env.NCCL_PROTO: LL}\n"
	p, err := Parse([]byte(spec), "s.yaml", Options{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}, p.Runs[0].Env)
	p, err = Parse([]byte(spec), "s.yaml", Options{Set: []string{"env.NCCL_ALGO=Tree", "env.NCCL_PROTO=Simple,LL128"}})
	require.NoError(t, err)
	require.Len(t, p.Runs, 2)
	assert.Equal(t, map[string]string{"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}, p.Runs[0].Env)
	assert.Equal(t, "LL128", p.Runs[1].Env["NCCL_PROTO"])
	_, err = Parse([]byte("name: a\nenv: {X: a}\nbase: {env.X: b}\n"), "s.yaml", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "s.yaml:3:15: env.X is given twice (first at 2:10)")
}

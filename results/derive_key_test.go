package results

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestConfigFieldRolesCoverRunConfig: every field of sweeps.RunConfig is
// classified in ConfigFieldRoles, and the table names no field that is gone. A
// field added to RunConfig fails here until someone decides whether runs that
// differ in it may be compared (it is in the derived figures' key meanwhile).
func TestConfigFieldRolesCoverRunConfig(t *testing.T) {
	typ := reflect.TypeFor[sweeps.RunConfig]()
	fields := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		fields[f.Name] = true
		_, ok := ConfigFieldRoles[f.Name]
		assert.True(t, ok, "sweeps.RunConfig.%s is not classified in results.ConfigFieldRoles: "+
			"say whether a run and its scaling/memory baseline may differ in it", f.Name)
	}
	for name := range ConfigFieldRoles {
		assert.True(t, fields[name], "ConfigFieldRoles lists %s, which sweeps.RunConfig no longer has", name)
	}
	var ws []string
	for name, role := range ConfigFieldRoles {
		if role == RoleWorldSize {
			ws = append(ws, name)
		}
	}
	assert.ElementsMatch(t, []string{"Nodes", "GPUsPerNode", "WorldSize", "GradAccum", "GlobalBatch"}, ws,
		"only the fields that change with the world size may differ between a run and its scaling baseline")
}

// TestDeriveKeyHoldsEverySameConfigField: changing any one field classified
// RoleSameConfig (by reflection, so a new field is tested too) gives another
// key, and changing a bookkeeping field does not.
func TestDeriveKeyHoldsEverySameConfigField(t *testing.T) {
	base := fixtureConfig(2, sweeps.FullShard)
	base.Checkpoint, base.CheckpointEvery = sweeps.CheckpointNone, 0
	k0 := keyOf(&base)
	typ := reflect.TypeFor[sweeps.RunConfig]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		rc := base
		v := reflect.ValueOf(&rc).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 7)
		case reflect.Float64:
			v.SetFloat(v.Float() + 0.25)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Map:
			m := reflect.MakeMap(v.Type())
			m.SetMapIndex(reflect.ValueOf("K").Convert(v.Type().Key()), reflect.ValueOf("v").Convert(v.Type().Elem()))
			v.Set(m)
		case reflect.Slice:
			v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), reflect.ValueOf("x").Convert(v.Type().Elem())))
		default:
			t.Fatalf("RunConfig.%s: kind %s has no change in this test; add one", f.Name, v.Kind())
		}
		k := keyOf(&rc)
		switch ConfigFieldRoles[f.Name] {
		case RoleBookkeeping:
			assert.Equal(t, k0, k, "%s is bookkeeping: it must not part runs", f.Name)
		case RoleWorldSize:
			assert.Equal(t, k0.rest, k.rest, "%s changes with the world size: it is kept apart", f.Name)
		default:
			assert.NotEqual(t, k0, k, "runs that differ in %s must not be compared", f.Name)
		}
	}
	// An empty map is no map, and a config written before the checkpoint axis ("")
	// is none.
	rc := base
	rc.Env, rc.BackendOptions, rc.Checkpoint = map[string]string{}, map[string]any{}, ""
	assert.Equal(t, k0, keyOf(&rc))
}

// planRuns expands a spec into runs measured at the throughputs tps gives each.
func planRuns(t *testing.T, spec string, tps func(rc sweeps.RunConfig) float64) []Run {
	t.Helper()
	plan, err := sweeps.Parse([]byte(spec), "spec.yaml", sweeps.Options{})
	require.NoError(t, err)
	var runs []Run
	for _, rc := range plan.Runs {
		runs = append(runs, Run{Config: rc, Metrics: Metrics{RunID: rc.ID, Status: StatusOK,
			WorldSize: rc.WorldSize, TokensPerSPerRank: F64(tps(rc))}})
	}
	Derive(runs)
	return runs
}

// TestDeriveCheckpointExampleKeepsKindsApart reproduces issue 37's item 1 on the
// shipped checkpoint-gotrain-cpu.yaml: the sharded run at world size 1 was
// divided by the full-checkpoint run (12754 / 15135 = 84.3%), and every sharded
// row by the full row. Each checkpoint kind now scales against itself.
func TestDeriveCheckpointExampleKeepsKindsApart(t *testing.T) {
	plan, err := sweeps.Load("../sweeps/examples/checkpoint-gotrain-cpu.yaml", sweeps.Options{})
	require.NoError(t, err)
	tps := map[string]map[int]float64{
		"full":    {1: 15135, 2: 12000, 4: 9000},
		"sharded": {1: 12754, 2: 11000, 4: 8000},
	}
	var runs []Run
	for _, rc := range plan.Runs {
		runs = append(runs, Run{Config: rc, Metrics: Metrics{RunID: rc.ID, Status: StatusOK, WorldSize: rc.WorldSize,
			TokensPerSPerRank: F64(tps[rc.Checkpoint][rc.WorldSize])}})
	}
	require.Len(t, runs, 6)
	Derive(runs)
	for _, r := range runs {
		require.NotNil(t, r.Derived.ScalingEfficiency, r.Config.ID)
		want := tps[r.Config.Checkpoint][r.Config.WorldSize] / tps[r.Config.Checkpoint][1]
		assert.InDelta(t, want, *r.Derived.ScalingEfficiency, 1e-12, "%s (%s checkpoint)", r.Config.ID, r.Config.Checkpoint)
		b := findRun(t, runs, r.Derived.ScalingBaseline)
		require.NotNil(t, b)
		assert.Equal(t, r.Config.Checkpoint, b.Config.Checkpoint)
		assert.Equal(t, 1, b.Config.WorldSize)
	}
}

// TestDeriveEnvAxisKeepsValuesApart reproduces issue 37's item 1 with an env
// axis: world_size [1, 2] × env.OMP_NUM_THREADS ["1", "2"] gave 112.5% at world
// size 1 (one thread's run over two threads'). Each thread count scales against
// itself, so world size 1 is 100% for both, and the DDP table carries no note
// about sharding.
func TestDeriveEnvAxisKeepsValuesApart(t *testing.T) {
	spec := `name: omp
backend: sim
hardware: cpu
model: tiny
seq_len: 64
steps: 4
base:
  sharding: ddp
  batch_per_device: 1
grid:
  world_size: [1, 2]
  env.OMP_NUM_THREADS: ["1", "2"]
`
	tps := map[string]map[int]float64{"1": {1: 9000, 2: 8500}, "2": {1: 8000, 2: 9000}}
	runs := planRuns(t, spec, func(rc sweeps.RunConfig) float64 { return tps[rc.Env["OMP_NUM_THREADS"]][rc.WorldSize] })
	require.Len(t, runs, 4)
	for _, r := range runs {
		th := r.Config.Env["OMP_NUM_THREADS"]
		require.NotNil(t, r.Derived.ScalingEfficiency, r.Config.ID)
		assert.InDelta(t, tps[th][r.Config.WorldSize]/tps[th][1], *r.Derived.ScalingEfficiency, 1e-12, "OMP_NUM_THREADS=%s ws%d", th, r.Config.WorldSize)
		assert.Equal(t, th, findRun(t, runs, r.Derived.ScalingBaseline).Config.Env["OMP_NUM_THREADS"])
	}
	// 9000/8000 = 112.5% for two threads at ws2: a DDP run's note must not
	// credit sharding.
	var buf bytes.Buffer
	require.NoError(t, Report(&buf, runs, ReportOptions{Metrics: []string{"scaling_efficiency"}}))
	assert.Contains(t, buf.String(), "112.5")
	assert.NotContains(t, buf.String(), "sharding cuts")
	assert.Contains(t, buf.String(), unshardedSuperlinearNote)
}

// TestSuperlinearNoteOnlyForShardedRuns: the note that credits sharding's 1/N
// optimizer share is shown where a sharded run reads above 100%, not for
// ddp/no_shard.
func TestSuperlinearNoteOnlyForShardedRuns(t *testing.T) {
	base := fixtureConfig(1, sweeps.FullShard)
	for _, tc := range []struct {
		sharding      string
		sharded, flat bool
	}{{sweeps.FullShard, true, false}, {sweeps.ShardGradOp, true, false}, {sweeps.DDP, false, true}, {sweeps.NoShard, false, true}} {
		b := base
		b.Sharding = tc.sharding
		runs := []Run{run(withWS(b, 1, 1, 2), StatusOK, 1000, nil, nil), run(withWS(b, 2, 1, 4), StatusOK, 1100, nil, nil)}
		Derive(runs)
		var buf bytes.Buffer
		require.NoError(t, Report(&buf, runs, ReportOptions{Metrics: []string{"scaling_efficiency"}}))
		assert.Equal(t, tc.sharded, strings.Contains(buf.String(), superlinearNote), "%s:\n%s", tc.sharding, buf.String())
		assert.Equal(t, tc.flat, strings.Contains(buf.String(), unshardedSuperlinearNote), "%s:\n%s", tc.sharding, buf.String())
	}
}

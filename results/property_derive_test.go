package results

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// worldSizeAxes are the fields of sweeps.RunConfig in which a run may differ
// from its scaling_efficiency baseline, written out here rather than read from
// ConfigFieldRoles, so that the property checks the table instead of repeating it.
var worldSizeAxes = []string{"Nodes", "GPUsPerNode", "WorldSize", "GradAccum", "GlobalBatch"}

// drawField draws a value for a RunConfig field from a few values, so that runs
// drawn apart often agree (a scaling or memory group forms) and sometimes do
// not. It works by kind, so a field added to RunConfig is drawn too.
func drawField(t *rapid.T, f reflect.StructField, v reflect.Value) {
	label := "RunConfig." + f.Name
	switch f.Name {
	case "Sharding":
		v.SetString(rapid.SampledFrom(sweeps.ShardingValues).Draw(t, label))
		return
	case "Checkpoint":
		v.SetString(rapid.SampledFrom([]string{"", sweeps.CheckpointNone, "sharded", "full"}).Draw(t, label))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(rapid.SampledFrom([]string{"a", "b"}).Draw(t, label))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(rapid.SampledFrom([]int{1, 2, 4}).Draw(t, label)))
	case reflect.Float64:
		v.SetFloat(rapid.SampledFrom([]float64{0, 0.05}).Draw(t, label))
	case reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, label))
	case reflect.Map:
		n := rapid.IntRange(0, 2).Draw(t, label+".len")
		if n == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		m := reflect.MakeMap(v.Type())
		for i := range n {
			key := []string{"OMP_NUM_THREADS", "NCCL_ALGO"}[i]
			val := rapid.SampledFrom([]string{"1", "2"}).Draw(t, fmt.Sprintf("%s[%s]", label, key))
			var ev reflect.Value
			if v.Type().Elem().Kind() == reflect.String {
				ev = reflect.ValueOf(val)
			} else {
				ev = reflect.ValueOf(any(val))
			}
			m.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), ev.Convert(v.Type().Elem()))
		}
		v.Set(m)
	case reflect.Slice:
		if rapid.Bool().Draw(t, label+".set") {
			v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), reflect.ValueOf("x").Convert(v.Type().Elem())))
		} else {
			v.Set(reflect.Zero(v.Type()))
		}
	default:
		t.Fatalf("RunConfig.%s: kind %s is not drawn; teach drawField", f.Name, v.Kind())
	}
}

// drawRunConfigs draws a set of run configs: a base point with every field drawn,
// and runs that each redraw some of its fields, the world-size axes and
// sharding more often than the others. IDs are unique.
func drawRunConfigs(t *rapid.T) []sweeps.RunConfig {
	typ := reflect.TypeFor[sweeps.RunConfig]()
	var base sweeps.RunConfig
	bv := reflect.ValueOf(&base).Elem()
	for i := range typ.NumField() {
		drawField(t, typ.Field(i), bv.Field(i))
	}
	n := rapid.IntRange(2, 6).Draw(t, "runs")
	out := make([]sweeps.RunConfig, n)
	for r := range n {
		rc := base
		v := reflect.ValueOf(&rc).Elem()
		for i := range typ.NumField() {
			f := typ.Field(i)
			p := 8 // one field in 8 is redrawn
			if slices.Contains(worldSizeAxes, f.Name) || f.Name == "Sharding" {
				p = 2
			}
			if rapid.IntRange(1, p).Draw(t, fmt.Sprintf("run%d.redraw.%s", r, f.Name)) == 1 {
				drawField(t, f, v.Field(i))
			}
		}
		rc.ID = fmt.Sprintf("run%d", r)
		out[r] = rc
	}
	return out
}

// differingFields names the fields in which a and b differ, bookkeeping
// (ConfigFieldRoles) left out; an empty map is none, and an empty checkpoint
// kind is none (a config stored before the axis).
func differingFields(a, b sweeps.RunConfig) []string {
	norm := func(rc *sweeps.RunConfig) reflect.Value {
		if !rc.Checkpoints() {
			rc.Checkpoint = sweeps.CheckpointNone
		}
		return reflect.ValueOf(rc).Elem()
	}
	av, bv := norm(&a), norm(&b)
	var out []string
	for i := range av.NumField() {
		f := av.Type().Field(i)
		if ConfigFieldRoles[f.Name] == RoleBookkeeping {
			continue
		}
		x, y := av.Field(i), bv.Field(i)
		if (x.Kind() == reflect.Map || x.Kind() == reflect.Slice) && x.Len() == 0 && y.Len() == 0 {
			continue
		}
		if !reflect.DeepEqual(x.Interface(), y.Interface()) {
			out = append(out, f.Name)
		}
	}
	return out
}

// TestPropertyDerivedBaselineDiffersOnlyInWorldSize: over run configs drawn
// across every field of sweeps.RunConfig (env, checkpointing, backend options
// included), a run's scaling_efficiency baseline differs from it only in the
// world-size axes, and its memory_saving baseline only in sharding (and is a
// no_shard or ddp run). rapid prints the smallest set of configs that breaks it.
func TestPropertyDerivedBaselineDiffersOnlyInWorldSize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		configs := drawRunConfigs(t)
		runs := make([]Run, len(configs))
		byID := map[string]int{}
		for i, rc := range configs {
			runs[i] = Run{Config: rc, Metrics: Metrics{RunID: rc.ID, Status: StatusOK, WorldSize: rc.WorldSize,
				TokensPerSPerRank: F64(float64(1000 + 100*i)), PeakMemReservedBytes: I64(int64(1<<30 + i))}}
			byID[rc.ID] = i
		}
		Derive(runs)
		for _, r := range runs {
			if r.Derived.ScalingEfficiency != nil {
				b := runs[byID[r.Derived.ScalingBaseline]].Config
				for _, f := range differingFields(r.Config, b) {
					if !slices.Contains(worldSizeAxes, f) {
						t.Fatalf("%s's scaling baseline %s differs in %s, not a world-size axis:\nrun      %+v\nbaseline %+v",
							r.Config.ID, b.ID, f, r.Config, b)
					}
				}
			}
			if r.Derived.MemorySaving != nil {
				b := runs[byID[r.Derived.MemoryBaseline]].Config
				if b.Sharding != sweeps.NoShard && b.Sharding != sweeps.DDP {
					t.Fatalf("%s's memory baseline %s is %s, not no_shard or ddp", r.Config.ID, b.ID, b.Sharding)
				}
				for _, f := range differingFields(r.Config, b) {
					if f != "Sharding" {
						t.Fatalf("%s's memory baseline %s differs in %s, not sharding:\nrun      %+v\nbaseline %+v",
							r.Config.ID, b.ID, f, r.Config, b)
					}
				}
			}
		}
	})
}

package sim

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// memoConfigs are runs that reach the parts of the model each field could
// matter to: several nodes, an environment the sim reads, checkpointing, cpu,
// another backend's options, an infeasible point and an invalid one.
func memoConfigs() []sweeps.RunConfig {
	multi := cfg("llama3-8b", 16, sweeps.HybridShard)
	multi.Nodes, multi.GPUsPerNode = 2, 8
	multi.Env = map[string]string{"NCCL_IB_DISABLE": "1", "OTHER": "x"}
	ckpt := ckptConfig(8, 8, "sharded", map[string]any{"storage_bw_gbps": 2})
	cpu := cfg("tiny", 2, sweeps.DDP)
	cpu.Hardware = "cpu"
	torchrun := cfg("llama-1b", 8, sweeps.FullShard)
	torchrun.Backend = "torchrun"
	torchrun.BackendOptions = map[string]any{"fsdp_api": 1}
	big := cfg("llama3-8b", 1, sweeps.DDP)
	big.BatchPerDevice, big.SeqLen = 16, 2048
	bad := cfg("tiny", 1, sweeps.HybridShard)
	opts := cfg("gpt2-124m", 4, sweeps.ShardGradOp)
	opts.BackendOptions = map[string]any{"efficiency": 0.3, "inter_node_fabric": "tcp"}
	opts.ActivationCheckpointing, opts.CPUOffload, opts.GradAccum = true, true, 2
	return []sweeps.RunConfig{cfg("llama-1b", 8, sweeps.FullShard), multi, ckpt, cpu, torchrun, big, bad, opts}
}

// changed returns v set to a value other than its own (and than the zero
// value), of its type.
func changed(t *testing.T, v reflect.Value) reflect.Value {
	t.Helper()
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.String:
		out.SetString(v.String() + "-changed")
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[sweeps.Duration]() {
			out.SetInt(v.Int() + int64(time.Hour))
		} else {
			out.SetInt(v.Int() + 7)
		}
	case reflect.Float64:
		out.SetFloat(v.Float() + 0.05)
	case reflect.Bool:
		out.SetBool(!v.Bool())
	case reflect.Slice:
		out = reflect.ValueOf([]string{"efficiency"})
	case reflect.Map:
		out = reflect.MakeMap(v.Type())
		for _, k := range v.MapKeys() {
			out.SetMapIndex(k, v.MapIndex(k))
		}
		val := reflect.ValueOf("changed").Convert(v.Type().Elem())
		out.SetMapIndex(reflect.ValueOf("model"), val)
	default:
		t.Fatalf("no change for a %s", v.Type())
	}
	return out
}

// TestMemoKeyFieldsClassified: every RunConfig field is either in the memo's
// key (memoKey, by name) or listed in notPredicted, never both; and changing a
// listed field changes neither the prediction nor Validate's verdict, so two
// runs with equal keys get equal answers. A field added to RunConfig fails
// here until it is classified, and a field the sim starts to read fails here
// while it is still listed.
func TestMemoKeyFieldsClassified(t *testing.T) {
	rcT := reflect.TypeFor[sweeps.RunConfig]()
	keyT := reflect.TypeFor[memoKey]()
	for name := range notPredicted {
		_, ok := rcT.FieldByName(name)
		assert.True(t, ok, "notPredicted names %s, which RunConfig lacks", name)
	}
	for i := range keyT.NumField() {
		name := keyT.Field(i).Name
		_, ok := rcT.FieldByName(name)
		assert.True(t, ok, "memoKey holds %s, which RunConfig lacks", name)
		assert.NotContains(t, notPredicted, name, "%s is both keyed and listed as not predicted", name)
	}
	for i := range rcT.NumField() {
		name := rcT.Field(i).Name
		_, keyed := keyT.FieldByName(name)
		_, ignored := notPredicted[name]
		assert.True(t, keyed || ignored, "RunConfig.%s is neither in memoKey nor in notPredicted: classify it", name)
	}

	ctx := context.Background()
	cal := testCalibration(t)
	for _, base := range memoConfigs() {
		wantPred, wantPErr := PredictCalibrated(base, nil, nil)
		wantCal, wantCalErr := PredictCalibrated(base, nil, cal)
		wantV := New().Validate(ctx, base)
		for name := range notPredicted {
			rc := base
			f := reflect.ValueOf(&rc).Elem().FieldByName(name)
			f.Set(changed(t, f))
			what := fmt.Sprintf("%s with %s changed", base.Model, name)
			pred, perr := PredictCalibrated(rc, nil, nil)
			assert.Equal(t, errText(wantPErr), errText(perr), what)
			assert.Equal(t, wantPred, pred, what)
			pred, perr = PredictCalibrated(rc, nil, cal)
			assert.Equal(t, errText(wantCalErr), errText(perr), what)
			assert.Equal(t, wantCal, pred, what)
			assert.Equal(t, errText(wantV), errText(New().Validate(ctx, rc)), what)
		}
	}
}

// TestMemoKeyTellsKeyedFieldsApart: runs differing in a keyed field get keys
// of their own (so the memo never answers one with the other's prediction).
func TestMemoKeyTellsKeyedFieldsApart(t *testing.T) {
	m := NewMemo(nil, nil)
	keyT := reflect.TypeFor[memoKey]()
	for _, base := range memoConfigs() {
		k0, ok := m.key(&base)
		require.True(t, ok)
		for i := range keyT.NumField() {
			name := keyT.Field(i).Name
			rc := base
			f := reflect.ValueOf(&rc).Elem().FieldByName(name)
			f.Set(changed(t, f))
			k, ok := m.key(&rc)
			require.True(t, ok)
			assert.NotEqual(t, k0, k, "%s changed, same key", name)
		}
	}
}

// TestMemoPredictsAsPredictCalibrated: the memo's answers are the direct
// calls', for runs asked twice, runs sharing a key (seeds) and after the memo
// starts over.
func TestMemoPredictsAsPredictCalibrated(t *testing.T) {
	ctx := context.Background()
	cal := testCalibration(t)
	for _, c := range []struct {
		extra map[string]any
		cal   *Calibration
	}{{nil, nil}, {map[string]any{"efficiency": 0.4}, nil}, {nil, cal}} {
		m := NewMemo(c.extra, c.cal)
		for round := range 3 {
			for _, base := range memoConfigs() {
				for seed := range int64(3) {
					rc := base
					rc.Seed = seed
					rc.AssignID()
					want, werr := PredictCalibrated(rc, c.extra, c.cal)
					got, gerr := m.Predict(rc)
					assert.Equal(t, errText(werr), errText(gerr), "round %d", round)
					assert.Equal(t, want, got, "round %d", round)
					assert.Equal(t, errText(New().Validate(ctx, rc)), errText(m.Validate(ctx, rc)))
				}
			}
			if round == 1 {
				clear(m.m) // as when full
			}
		}
	}
}

// TestMemoBounded: the memo holds at most memoMax entries.
func TestMemoBounded(t *testing.T) {
	m := NewMemo(nil, nil)
	rc := cfg("tiny", 1, sweeps.DDP)
	for i := range memoMax + 10 {
		rc.SeqLen = 1 + i%sweeps.MaxSeqLen
		rc.Steps = 1 + i/sweeps.MaxSeqLen
		m.entry(&rc)
		require.LessOrEqual(t, len(m.m), memoMax)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// testCalibration has constants for the GPU and the cpu profiles memoConfigs use.
func testCalibration(t *testing.T) *Calibration {
	t.Helper()
	return &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{
		"h100-sxm": {Efficiency: 0.4, StepOverheadS: 0.01, CollectiveLatencyS: 1e-4},
		"cpu":      {Efficiency: 0.1},
	}}
}

package backends

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// FuzzPluginResult decodes a plugin's result as the host does (the result_json of
// its Done message) and checks it: a result that passes must normalize to
// figures that are finite and can be stored, whatever the plugin sent.
func FuzzPluginResult(f *testing.F) {
	for _, s := range []string{
		`{"status": "ok", "world_size": 2, "tokens_per_step": 64, "measured_wall_s": 0.3, "steps": [{"step": 1, "step_time_s": 0.1, "tokens": 64}]}`,
		`{"status": "banana"}`, `{"status": "ok", "steps": [{"step_time_s": -1}]}`,
		`{"status": "ok", "tokens_per_step": 1125899906842624, "measured_wall_s": 1e-300}`,
		`{"status": "ok", "world_size": 2, "per_rank": [{"rank": 0, "tokens": 9, "measured_wall_s": 1e-320}, {"rank": 1, "tokens": 9, "measured_wall_s": 1e-320}]}`,
		`{"status": "ok", "world_size": 2, "measured_wall_s": 1, "tokens_per_step": 8, "model_flops_per_token": 1e18, "peak_flops_per_s": 1e-300, "steps": [{"step": 1, "step_time_s": 1}]}`,
	} {
		f.Add([]byte(s))
	}
	rc := sweeps.RunConfig{WorldSize: 2, Steps: 3, GlobalBatch: 4, SeqLen: 16, Nodes: 1, GPUsPerNode: 2}
	f.Fuzz(func(t *testing.T, data []byte) {
		var res results.Result
		if json.Unmarshal(data, &res) != nil {
			return // the host refuses it as unreadable
		}
		if CheckResult(rc, res) != nil {
			return
		}
		m := results.Normalize(rc, []results.Result{res})
		for name, v := range map[string]*float64{"tokens_per_s": m.TokensPerS, "tokens_per_s_per_rank": m.TokensPerSPerRank, "mfu": m.MFU} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				t.Fatalf("%s is %v from an accepted result %s", name, *v, data)
			}
		}
		if _, err := json.Marshal(m); err != nil {
			t.Fatalf("metrics of an accepted result cannot be stored: %v (%s)", err, data)
		}
	})
}

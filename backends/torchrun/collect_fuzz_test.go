package torchrun

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// FuzzLegacyMetricsFile: any metrics.json of the existing scripts' kind is read or
// refused with the file named, never panics; what is read is storable and gives a
// positive, finite wall time.
func FuzzLegacyMetricsFile(f *testing.F) {
	for _, s := range []string{
		`{"wall_time_s": 4.739885568618774, "approx_tokens_per_rank": 5120, "approx_tokens_per_s_per_rank": 1080.19, "world_size": 2, "gpu0": "NVIDIA H100 80GB HBM3", "torch": "2.5.1+cu121", "fsdp": true, "bf16": false}`,
		`{"wall_time_s": NaN, "approx_tokens_per_rank": 5120}`, `{"wall_time_s": 1, "approx_tokens_per_s_per_rank": 1e308, "x": Infinity}`,
		`{"wall_time_s": 0}`, `[]`, `nul`,
	} {
		f.Add([]byte(s))
	}
	rc := runConfig(2, sweeps.DDP)
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "metrics.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := LegacyResult(rc, path, true, nil)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		if !(res.MeasuredWallS > 0) || math.IsInf(res.MeasuredWallS, 0) {
			t.Fatalf("accepted wall time %v", res.MeasuredWallS)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("an accepted result cannot be stored: %v", err)
		}
		m := results.Normalize(rc, []results.Result{res})
		if _, err := json.Marshal(m); err != nil {
			t.Fatalf("its metrics cannot be stored: %v", err)
		}
	})
}

// FuzzLogExtractors: any run output, read by the built-in extractors and by a
// user's regular expression, gives figures within bounds or an error; never a
// panic, never a figure that cannot be stored.
func FuzzLogExtractors(f *testing.F) {
	for _, s := range []string{
		"iter 1: loss 2.3100, time 45.21ms, mfu 38.12%\niter 2: loss 2.2, time 44ms, mfu 38%",
		"iter 1: loss 2.3, time -5ms\niter 2: loss 2.2, time 0ms",
		"{'loss': 2.5, 'epoch': 0.1}\n{'loss': nan, 'epoch': 0.2}\n{'train_runtime': 2.0, 'train_samples_per_second': 8.0}",
		"{'train_runtime': 0, 'train_samples_per_second': -1}", "step took 1e400 s", "step took 0.5 s\nstep took 0.25 s",
	} {
		f.Add(s)
	}
	rc := runConfig(1, sweeps.DDP)
	rc.Steps = 4
	optionSets := []map[string]any{
		{"logs": map[string]any{"builtin": "iter", "skip_steps": 1}},
		{"logs": map[string]any{"builtin": "hf_trainer"}},
		{"logs": map[string]any{"metrics": map[string]any{
			"step_time": map[string]any{"regex": `step took (?P<s>\S+) s`, "unit": "s"},
			"loss":      map[string]any{"regex": `loss (?P<l>\S+)`}}}},
	}
	f.Fuzz(func(t *testing.T, out string) {
		for _, opts := range optionSets {
			o, err := ParseOptions(opts)
			if err != nil {
				t.Fatal(err)
			}
			rep := &Report{logs: o.Logs}
			for _, line := range strings.Split(out, "\n") {
				rep.Stdout(line)
			}
			x, err := extract(o.Logs, &rep.lines, rc.SeqLen)
			if err != nil {
				continue
			}
			var res results.Result
			c := collector{rc: rc, o: o, warn: func(string) {}}
			if err := c.fromLogs(&res, x); err != nil {
				continue
			}
			for _, st := range res.Steps {
				if !(st.StepTimeS > 0) || math.IsInf(st.StepTimeS, 0) {
					t.Fatalf("accepted step time %v from %q", st.StepTimeS, out)
				}
			}
			if _, err := json.Marshal(res); err != nil {
				t.Fatalf("an accepted result cannot be stored: %v (from %q)", err, out)
			}
		}
	})
}

// FuzzParseOptions: whatever backend_options torchrun accepts is within bounds,
// and whatever it refuses is a spec error.
func FuzzParseOptions(f *testing.F) {
	for _, n := range knownOptions {
		f.Add(n, "1")
	}
	f.Add("lr", "+Inf")
	f.Add("rdzv_port", "70000")
	f.Add("launcher", "deepspeed")
	f.Add("launcher", "python")
	f.Add("launcher", "command")
	f.Add("command", "deepspeed {script} {script_args}")
	f.Fuzz(func(t *testing.T, key, value string) {
		o, err := ParseOptions(map[string]any{key: value})
		if err != nil {
			if !backends.IsSpecError(err) {
				t.Fatalf("a bad option is not a spec error: %v", err)
			}
			return
		}
		if !(o.LR > 0 && o.LR <= maxLR) || !(o.WeightDecay >= 0 && o.WeightDecay <= maxWeightDecay) ||
			o.RdzvPort < 1 || o.RdzvPort > 65535 || o.FSDPAPI < 0 || o.FSDPAPI > 2 ||
			!slices.Contains(launchers, o.Launcher) || (o.Launcher == LauncherCommand) != (o.Command != nil) {
			t.Fatalf("accepted %q=%q as %+v", key, value, o)
		}
	})
}

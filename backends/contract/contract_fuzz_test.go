package contract

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// FuzzDecodeJSON: any input decodes or fails with a position, never panics; the
// non-finite values it lists are within the input, and without them it decodes as
// encoding/json does.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a": NaN}`, `[Infinity, -Infinity, "NaN"]`, `{"steps": [{"loss": NaN}]}`, `NaN`, `"\"NaN`, `{"a\\": Infinity}`, `-`, `{"x": -Infinit}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		bad, err := DecodeJSON("f", data, &v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for _, nf := range bad {
			if !math.IsNaN(nf.Value) && !math.IsInf(nf.Value, 0) {
				t.Fatalf("%s listed with the finite value %v", nf.Field, nf.Value)
			}
			if nf.Field == "" || !strings.HasPrefix(nf.Pos, "f:") {
				t.Fatalf("non-finite value without field or position: %+v", nf)
			}
		}
		if len(bad) == 0 {
			var want any
			if json.Unmarshal(data, &want) != nil {
				t.Fatalf("DecodeJSON accepted what encoding/json refuses: %q", data)
			}
		}
	})
}

// FuzzParseStepLine: any line is no step line, a valid one, or an error; a valid
// one's figures are within bounds.
func FuzzParseStepLine(f *testing.F) {
	for _, s := range []string{
		`FSDPBENCH {"step": 3, "loss": 1.5, "step_time_s": 0.2, "rank": 0}`,
		`[1]:FSDPBENCH {"step": 1, "loss": NaN, "step_time_s": 0.2}`,
		`FSDPBENCH {"step": 1, "step_time_s": -1}`, `FSDPBENCH {`, `FSDPBENCH done`, `iter 3: loss 2.0`,
		`FSDPBENCH {"step": 1, "step_time_s": 0.1, "rank": 0}FSDPBENCH {"step": 1, "step_time_s": 0.1, "rank": 1}`,
		`FSDPBENCH {"step": 2, "step_time_s": 0.1}iter 7 FSDPBENCH {`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		st, ok, err := ParseStepLine(line)
		if ok && err != nil {
			t.Fatalf("both a step and an error: %v", err)
		}
		sts, errs := ParseStepLines(line)
		if n := strings.Count(line, StepPrefix); len(sts)+len(errs) > n {
			t.Fatalf("%d steps and %d errors from %d prefixes", len(sts), len(errs), n)
		}
		// StepLines keeps what ParseStepLines keeps less the repeats and the
		// ranks outside the world, the line read twice giving no step again.
		c := NewStepLines(2)
		for pass := range 2 {
			kept, refused := c.Parse(line)
			if len(kept)+len(refused) != len(sts)+len(errs) {
				t.Fatalf("StepLines: %d kept and %d refused of %d records", len(kept), len(refused), len(sts)+len(errs))
			}
			for _, st := range kept {
				if st.Rank >= 2 || pass == 1 {
					t.Fatalf("StepLines kept %+v (pass %d)", st, pass)
				}
			}
		}
		if ok {
			sts = append(sts, st)
		}
		for _, st := range sts {
			if st.Step.Step < 1 || !(st.StepTimeS > 0) || math.IsInf(st.StepTimeS, 0) || st.Tokens < 0 {
				t.Fatalf("accepted a step out of bounds: %+v", st)
			}
			if _, err := json.Marshal(st); err != nil {
				t.Fatalf("an accepted step cannot be stored: %v", err)
			}
		}
	})
}

// FuzzReadRanks: any rank file is read or refused with a reason, never panics;
// what is read can be stored and every step time is positive and finite.
func FuzzReadRanks(f *testing.F) {
	for _, s := range []string{
		`{"rank": 0, "tokens": 16, "measured_wall_s": 1, "steps": [{"step": 1, "loss": 2.5, "step_time_s": 0.5}, {"step": 2, "loss": NaN, "step_time_s": 0.5}]}`,
		`{"rank": 0, "steps": [{"step": 1, "step_time_s": -0.5}, {"step": 2, "step_time_s": 0.5}]}`,
		`{"rank": 0, "peak_mem_allocated_bytes": 1e30, "steps": []}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "rank-0.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		rc := sweeps.RunConfig{WorldSize: 1, Steps: 2, GlobalBatch: 2, SeqLen: 8}
		var res results.Result
		if err := ReadRanks(&res, rc, dir, "fuzz"); err != nil {
			if !strings.Contains(err.Error(), "rank-0.json") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for _, st := range res.Steps {
			if !(st.StepTimeS > 0) || math.IsInf(st.StepTimeS, 0) {
				t.Fatalf("accepted step time %v", st.StepTimeS)
			}
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("an accepted result cannot be stored: %v", err)
		}
		if res.Status == results.StatusDiverged && !bytes.Contains(data, []byte("N")) && !bytes.Contains(data, []byte("I")) {
			t.Fatalf("diverged without a non-finite loss: %s", res.Error)
		}
	})
}

// FuzzExpandLists: any template element (the argv of a launcher's command)
// expands or fails naming the template, never panics, and never splits: the
// output has at most one argument per element but for the list's own, which
// arrive as they are.
func FuzzExpandLists(f *testing.F) {
	for _, s := range []string{"{python}", "{script_args}", "--x={run_dir}", "{activation_checkpointing?--ac}",
		"{{literal}}", "{", "}", "{nope}", "{script_args}x", "{model?x}", "$(id); {output_dir} | cat"} {
		f.Add(s, "a b;$(c)")
	}
	f.Fuzz(func(t *testing.T, el, value string) {
		vars := map[string]string{"python": "/usr/bin/python3", "run_dir": value, "output_dir": value + " o",
			"activation_checkpointing": "true", "model": value}
		list := []string{"--a", value, "b c"}
		tmpl := []string{"prog", el, el}
		out, err := ExpandLists("where", tmpl, vars, map[string][]string{"script_args": list})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "where[") {
				t.Fatalf("error without the template's name: %v", err)
			}
			return
		}
		if el == "{script_args}" {
			want := append(append([]string{"prog"}, list...), list...)
			if !slices.Equal(out, want) {
				t.Fatalf("the list was not spliced as it is: %q", out)
			}
			return
		}
		if len(out) > len(tmpl) || out[0] != "prog" {
			t.Fatalf("template %q became %q: an element was split", tmpl, out)
		}
	})
}

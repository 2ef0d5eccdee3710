package sweeps

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// aliasBombSpec is a billion-laughs spec: 9^8 values once its aliases expand.
var aliasBombSpec = func() string {
	s := "name: x\nbackend_options:\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i <= 8; i++ {
		prev := "*a" + string(rune('0'+i-1))
		s += "  a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.Repeat(prev+", ", 8) + prev + "]\n"
	}
	return s
}()

// FuzzParse feeds arbitrary bytes (seeded with the examples and a few broken specs)
// to Parse: it must never panic, every error must be a *SpecError, and a spec that
// parses must give unique IDs and a resolved form that parses to the same runs.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("examples", "*.yaml"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"name: x\ngrid: [1, 2\n",
		"name: x\nbase: &a {world_size: 8}\ninclude: [*a, {<<: *a, sharding: ddp}]\n",
		"name: x\nbase: {nodes: 2, gpus_per_node: 8, global_batch: 48}\n",
		"name: x\nsearch: {batch_per_device: max_fit}\ngrid: {batch_per_device: [4, 2]}\n",
		"a: &a [*a]\n",
		"name: x\nseq_len: !!str 5\n",
		// Issue 13's hostile inputs: nested brackets, an alias bomb, a block
		// mapping with many keys, a BOM, whole floats, numbers past their bounds.
		"name: x\nseq_len: " + strings.Repeat("[", 10_000) + "\n",
		"name: x\nbase: " + strings.Repeat("- ", 500) + "x\n",
		aliasBombSpec,
		"backend_options:\n" + strings.Repeat("  k: 1\n", 1200),
		"\ufeffname: bom\nseq_len: 2048.0\nsteps: 1e3\n",
		"name: x\nbase: {world_size: 1000000000000, seq_len: 1000000000}\nrepeats: 100000000\n",
		"name: x\nseed: 4294967296\ntimeout: 1000h\n",
		// Strings that are plain in block style but not inside a flow list
		// (found by CI's fuzzing: `[0[]` did not read back).
		"name: A\nbackend_options:\n  0A: [\"0[\"]\n  k: [\"a,b\", \"x\\ny\", \"{q\", \"c: d\", \"e #f\"]\n  m: [{a: \"}\"}, {\"a,b\": c}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plan, err := Parse(data, "fuzz.yaml", Options{})
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error is not a *SpecError: %T %v", err, err)
			}
			return
		}
		if len(plan.Runs) > 100_000 {
			return // a valid but huge grid: checking it would only slow the fuzzer
		}
		ids := map[string]bool{}
		for _, rc := range plan.Runs {
			if rc.ID == "" || ids[rc.ID] {
				t.Fatalf("missing or duplicate ID %q", rc.ID)
			}
			ids[rc.ID] = true
		}
		again, err := Parse(plan.Resolved, "resolved.yaml", Options{})
		if err != nil {
			t.Fatalf("the resolved spec does not parse: %v\n%s", err, plan.Resolved)
		}
		if len(again.Runs) != len(plan.Runs) {
			t.Fatalf("the resolved spec gives %d runs, the spec %d\n%s", len(again.Runs), len(plan.Runs), plan.Resolved)
		}
		for i := range plan.Runs {
			if again.Runs[i].ID != plan.Runs[i].ID {
				t.Fatalf("run %d: resolved ID %s, spec ID %s\n%s", i, again.Runs[i].ID, plan.Runs[i].ID, plan.Resolved)
			}
			// Field for field, backend_options included: an option value that
			// reads back differently (a flow list split at a comma) keeps its ID.
			if !reflect.DeepEqual(again.Runs[i], plan.Runs[i]) {
				t.Fatalf("run %d reads back differently from the resolved spec:\n%+v\n%+v\n%s", i, again.Runs[i], plan.Runs[i], plan.Resolved)
			}
		}
	})
}

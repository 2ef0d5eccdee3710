// Package ingest turns folders of past runs, as existing training scripts leave
// them (<run>/run_args.json + <run>/metrics.json with the key names of
// DESIGN.md's results section), into a results tree that report, export, compare
// and gate read like any sweep's.
//
// A folder's settings are mapped onto the canonical axes by a table of the names
// scripts commonly use (batch_size_per_device, per_device_train_batch_size,
// gradient_checkpointing, max_seq_length, ...); bf16/fp16 flags give
// mixed_precision; `fsdp: true` gives the sharding named by Options.FSDPSharding
// (a boolean cannot say which strategy). Each run's config is then built by the
// sweeps package from a spec (Options.Spec, or a minimal one) with the mapped
// values as --set overrides, so defaults, derived axes and run IDs follow the
// same rules as a sweep's: a folder and a fresh sweep of the same settings get
// the same ID, and compare matches them. What cannot be mapped is listed in the
// Report and kept as it is in the metrics' extra, never guessed.
package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/torchrun"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// RunArgsFile is the settings file of a past run's folder.
const RunArgsFile = "run_args.json"

// aliases maps the key names scripts use onto canonical axes and settings.
var aliases = map[string]string{
	"world_size": "world_size", "num_processes": "world_size", "num_gpus": "world_size", "n_gpus": "world_size",
	"nodes": "nodes", "nnodes": "nodes", "num_nodes": "nodes", "num_machines": "nodes",
	"gpus_per_node": "gpus_per_node", "nproc_per_node": "gpus_per_node",
	"batch_per_device": "batch_per_device", "batch_size_per_device": "batch_per_device",
	"per_device_train_batch_size": "batch_per_device", "micro_batch_size": "batch_per_device",
	"grad_accum": "grad_accum", "gradient_accumulation_steps": "grad_accum", "grad_accum_steps": "grad_accum",
	"seq_len": "seq_len", "seq_length": "seq_len", "max_seq_length": "seq_len", "max_seq_len": "seq_len",
	"block_size": "seq_len", "sequence_length": "seq_len",
	"model": "model", "model_name": "model", "model_name_or_path": "model",
	"activation_checkpointing": "activation_checkpointing", "gradient_checkpointing": "activation_checkpointing",
	"cpu_offload": "cpu_offload",
	"sharding":    "sharding", "sharding_strategy": "sharding", "fsdp_sharding_strategy": "sharding",
	"backward_prefetch": "backward_prefetch", "forward_prefetch": "forward_prefetch",
	"mixed_precision": "mixed_precision", "compile": "compile", "torch_compile": "compile",
	"seed": "seed", "steps": "steps", "max_steps": "steps", "max_iters": "steps",
}

// Options say how to read the folders.
type Options struct {
	// Name is the sweep name of the tree written (<out>/<Name>/).
	Name string
	// Spec is a sweep spec whose settings fill what a folder does not say (its
	// hardware, seed, model...); empty uses a minimal spec with the defaults.
	Spec string
	// Set are --set overrides applied to every folder, after its own values.
	Set []string
	// FSDPSharding is the sharding of folders that say only `fsdp: true`.
	FSDPSharding string
	// Map adds key -> axis mappings to the built-in table.
	Map map[string]string
	// TrainsModelAxis says the model axis is the model the runs trained, so MFU is
	// computed from its shape.
	TrainsModelAxis bool
	// Now stamps the manifest (time.Now when nil).
	Now func() time.Time
}

// Report is what was made of one folder.
type Report struct {
	Dir string
	// ID is the run the folder became (folders with the same settings are repeats
	// of one run).
	ID string
	// Mapped lists "key -> axis=value" for every key that was mapped.
	Mapped []string
	// Unmapped are the run_args.json keys that are no axis; they are kept in the
	// metrics' extra.run_args.
	Unmapped []string
	// Defaulted are the axes no key of the folder gave: they come from the spec,
	// --set, or the defaults.
	Defaulted []string
	// Warnings are notes about figures that disagree.
	Warnings []string
}

// Find returns the run folders under dirs: every directory holding a metrics.json
// (a dir may be one run's folder or hold many), sorted.
func Find(dirs []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && e.Name() == torchrun.LegacyMetricsFile && !seen[filepath.Dir(path)] {
				seen[filepath.Dir(path)] = true
				out = append(out, filepath.Dir(path))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ingest: no %s under %s", torchrun.LegacyMetricsFile, strings.Join(dirs, ", "))
	}
	sort.Strings(out)
	return out, nil
}

// run is one ingested folder before grouping.
type run struct {
	rc  sweeps.RunConfig
	res results.Result
	rep Report
}

// Ingest reads every run folder under dirs and writes the results tree
// <out>/<o.Name>/. Folders that come out as the same run are its repeats.
func Ingest(dirs []string, out string, o Options) ([]Report, error) {
	if o.Name == "" {
		return nil, errors.New("ingest: the sweep needs a name (--name)")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	spec, specName := []byte("name: "+o.Name+"\nbackend: torchrun\n"), "(ingest)"
	if o.Spec != "" {
		data, err := input.ReadFile(o.Spec, input.Spec)
		if err != nil {
			return nil, fmt.Errorf("ingest: --spec: %w", err)
		}
		spec, specName = data, o.Spec
	}
	folders, err := Find(dirs)
	if err != nil {
		return nil, err
	}
	var runs []run
	var resolved []byte
	for _, dir := range folders {
		r, plan, err := one(dir, spec, specName, o)
		if err != nil {
			return nil, err
		}
		if resolved == nil {
			resolved = plan.Resolved
		}
		runs = append(runs, r)
	}

	sd, err := results.OpenSweep(filepath.Join(out, o.Name))
	if err != nil {
		return nil, err
	}
	if err := sd.WriteSpec(resolved); err != nil {
		return nil, err
	}
	byID := map[string][]run{}
	var ids []string
	for _, r := range runs {
		if _, ok := byID[r.rc.ID]; !ok {
			ids = append(ids, r.rc.ID)
		}
		byID[r.rc.ID] = append(byID[r.rc.ID], r)
	}
	now := o.Now()
	man := results.Manifest{Sweep: o.Name, Started: now, Finished: now}
	for _, id := range ids {
		group := byID[id]
		rc := group[0].rc
		rc.Repeats = len(group)
		var reps []results.Result
		for _, r := range group {
			reps = append(reps, r.res)
		}
		m := results.Normalize(rc, reps)
		if err := sd.WriteRunArgs(rc); err != nil {
			return nil, err
		}
		if err := sd.WriteMetrics(id, m); err != nil {
			return nil, err
		}
		man.Runs = append(man.Runs, results.ManifestEntry{ID: id, Status: m.Status, Error: m.Error})
	}
	if err := sd.WriteManifest(man); err != nil {
		return nil, err
	}
	reports := make([]Report, len(runs))
	for i, r := range runs {
		reports[i] = r.rep
	}
	return reports, nil
}

// one maps a folder onto a run config and reads its metrics.
func one(dir string, spec []byte, specName string, o Options) (run, *sweeps.Plan, error) {
	r := run{rep: Report{Dir: dir}}
	metricsPath := filepath.Join(dir, torchrun.LegacyMetricsFile)
	metrics, err := readJSON(metricsPath)
	if err != nil {
		return r, nil, err
	}
	args := map[string]any{}
	argsPath := filepath.Join(dir, RunArgsFile)
	if _, err := os.Stat(argsPath); err == nil {
		if args, err = readJSON(argsPath); err != nil {
			return r, nil, err
		}
	}
	// The metrics file's own settings (world_size, fsdp, bf16) count when
	// run_args.json does not give them.
	settings := map[string]any{}
	for _, k := range []string{"world_size", "fsdp", "bf16"} {
		if v, ok := metrics[k]; ok {
			settings[k] = v
		}
	}
	for k, v := range args {
		settings[k] = v
	}

	sets, given, unmapped, err := mapSettings(settings, o)
	if err != nil {
		return r, nil, fmt.Errorf("ingest: %s: %w", dir, err)
	}
	r.rep.Unmapped = unmapped
	for _, s := range sets {
		r.rep.Mapped = append(r.rep.Mapped, s.from+" -> "+s.set)
	}
	all := make([]string, 0, len(sets)+len(o.Set))
	for _, s := range sets {
		all = append(all, s.set)
	}
	all = append(all, o.Set...)
	for _, s := range o.Set {
		k, _, _ := strings.Cut(s, "=")
		given[strings.TrimSpace(k)] = true
	}
	plan, err := sweeps.Parse(spec, specName, sweeps.Options{Set: all})
	if err != nil {
		return r, nil, fmt.Errorf("ingest: %s: its settings %s do not make a run: %w", dir, strings.Join(all, " "), err)
	}
	if len(plan.Runs) != 1 {
		return r, nil, fmt.Errorf("ingest: %s: the spec with the folder's settings gives %d runs, not one; give the axes it leaves open with --set", dir, len(plan.Runs))
	}
	r.rc = plan.Runs[0]
	for _, a := range []string{"world_size", "nodes", "batch_per_device", "grad_accum", "seq_len", "model", "sharding",
		"activation_checkpointing", "mixed_precision", "steps", "seed"} {
		if !given[a] {
			r.rep.Defaulted = append(r.rep.Defaulted, a)
		}
	}
	r.rep.ID = r.rc.ID

	res, err := torchrun.LegacyResult(r.rc, metricsPath, o.TrainsModelAxis, func(s string) { r.rep.Warnings = append(r.rep.Warnings, s) })
	if err != nil {
		return r, nil, fmt.Errorf("ingest: %w", err)
	}
	if len(unmapped) > 0 {
		kept := map[string]any{}
		for _, k := range unmapped {
			kept[k] = args[k]
		}
		res.Extra["run_args"] = kept
	}
	res.Extra["source_dir"] = dir
	if st, err := os.Stat(metricsPath); err == nil {
		res.Finished = st.ModTime()
	}
	r.res = res
	return r, plan, nil
}

// setting is one --set made from a folder key.
type setting struct{ from, set string }

// mapSettings turns a folder's settings into --set overrides; it returns them, the
// axes they give, and the keys that are no axis.
func mapSettings(s map[string]any, o Options) ([]setting, map[string]bool, []string, error) {
	var out []setting
	given := map[string]bool{}
	var unmapped []string
	add := func(from, axis, value string) {
		out = append(out, setting{from, axis + "=" + value})
		given[axis] = true
	}
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := s[k]
		axis, ok := o.Map[k]
		if !ok {
			axis, ok = aliases[k]
		}
		switch {
		case ok:
			val, err := scalar(v)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", k, err)
			}
			if axis == "sharding" {
				val = strings.ToLower(val)
			}
			add(k, axis, val)
		case k == "fsdp":
			b, isBool := v.(bool)
			if !isBool {
				return nil, nil, nil, fmt.Errorf("fsdp must be true or false, got %v", v)
			}
			if _, has := s["sharding"]; has {
				continue
			}
			if !b {
				add(k, "sharding", sweeps.DDP)
			} else if o.FSDPSharding != "" {
				add(k, "sharding", o.FSDPSharding)
			} else {
				return nil, nil, nil, errors.New("fsdp: true does not say which strategy; give it with --fsdp-sharding (full_shard, shard_grad_op, hybrid_shard, no_shard)")
			}
		case k == "bf16" || k == "fp16":
			b, isBool := v.(bool)
			if !isBool {
				return nil, nil, nil, fmt.Errorf("%s must be true or false, got %v", k, v)
			}
			if _, has := s["mixed_precision"]; has {
				continue
			}
			other := map[string]string{"bf16": "fp16", "fp16": "bf16"}[k]
			ob, _ := s[other].(bool)
			switch {
			case b:
				add(k, "mixed_precision", k)
			case !ob && (k == "bf16" || s["bf16"] == nil):
				// Neither low precision flag is set: the run was fp32.
				add(k, "mixed_precision", sweeps.FP32)
			}
		default:
			unmapped = append(unmapped, k)
		}
	}
	return out, given, unmapped, nil
}

// scalar is v as a --set value.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if strings.ContainsAny(x, ",[]") {
			return "", fmt.Errorf("value %s holds a comma or bracket, which --set reads as a list; map it with --set yourself", input.Quote(x, 64))
		}
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	default:
		return "", fmt.Errorf("value %s (%T) is not a number, string or boolean", input.Quote(fmt.Sprint(v), 64), v)
	}
}

// readJSON reads a JSON object; syntax errors name file:line:column.
func readJSON(path string) (map[string]any, error) {
	data, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%s: not valid JSON: %v", contract.JSONPos(path, data, err), err)
		}
		return nil, fmt.Errorf("%s: not a JSON object: %v", path, err)
	}
	return m, nil
}

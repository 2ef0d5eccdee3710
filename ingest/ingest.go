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
	"context"
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
	"github.com/fsdpbench/fsdpbench/harness/dirlock"
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
	// Wait makes Ingest wait while another process writes the tree, instead of
	// returning a *dirlock.HeldError.
	Wait bool
	// OnWait is told once when Ingest starts waiting, and for whom.
	OnWait func(*dirlock.HeldError)
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
//
// It holds the tree's lock (dirlock) while it writes, as a sweep does: with a
// sweep or another ingest writing the same tree it returns a *dirlock.HeldError,
// or waits with o.Wait (until ctx ends).
//
// An existing tree is written again only when every run it holds was ingested
// from a folder that this call reads again: re-running an ingest, over the same
// folders or more of them, brings every run back and is safe; anything else (a
// sweep's tree, an ingest of other folders) would lose runs and is refused.
func Ingest(ctx context.Context, dirs []string, out string, o Options) ([]Report, error) {
	if o.Name == "" {
		return nil, errors.New("ingest: the sweep needs a name (--name)")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// The name becomes a directory: the spec's own rule for names says which
	// (no "..", no separators), checked on a spec that quotes it whole.
	quoted, err := json.Marshal(o.Name)
	if err != nil {
		return nil, fmt.Errorf("ingest: --name: %w", err)
	}
	spec, specName := []byte("name: "+string(quoted)+"\nbackend: torchrun\n"), "(ingest --name)"
	if _, err := sweeps.Parse(spec, specName, sweeps.Options{}); err != nil {
		return nil, fmt.Errorf("ingest: --name %q: %w", o.Name, err)
	}
	if o.Spec != "" {
		data, err := input.ReadFile(o.Spec, input.Spec)
		if err != nil {
			return nil, fmt.Errorf("ingest: --spec: %w", err)
		}
		spec, specName = data, o.Spec
	}
	target := filepath.Join(out, o.Name)
	folders, err := Find(dirs)
	if err != nil {
		return nil, err
	}
	folders = outside(folders, target)
	if len(folders) == 0 {
		return nil, fmt.Errorf("ingest: the only %s files under %s are in %s, the tree this ingest writes", torchrun.LegacyMetricsFile, strings.Join(dirs, ", "), target)
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

	sd, err := results.OpenSweep(target)
	if err != nil {
		return nil, err
	}
	lock, err := dirlock.Acquire(ctx, sd.Path, dirlock.Options{Wait: o.Wait, OnWait: o.OnWait})
	if err != nil {
		return nil, err
	}
	defer func() { _ = lock.Release() }()
	previous, err := replaceable(sd, folders)
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
		if m.Extra == nil {
			m.Extra = map[string]any{}
		}
		sources := make([]string, 0, len(group))
		for _, r := range group {
			src, _ := r.res.Extra["source_dir"].(string)
			sources = append(sources, src)
		}
		m.Extra[sourceDirsKey] = sources
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
	// Runs of the previous ingest that these folders now give other IDs (another
	// --set or --spec): the same folders, mapped anew, so the old ones go.
	for _, id := range previous {
		if _, ok := byID[id]; !ok {
			if err := os.RemoveAll(sd.RunDir(id)); err != nil {
				return nil, fmt.Errorf("ingest: remove %s, which the folders no longer give: %w", sd.RunDir(id), err)
			}
		}
	}
	reports := make([]Report, len(runs))
	for i, r := range runs {
		reports[i] = r.rep
	}
	return reports, nil
}

// sourceDirsKey is the metrics' extra key that lists the folders (absolute) a run
// was ingested from; "source_dir" holds the last one, as it always has.
const sourceDirsKey = "source_dirs"

// outside drops the folders inside dir: an ingest never reads the tree it writes.
func outside(folders []string, dir string) []string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return folders
	}
	var kept []string
	for _, f := range folders {
		if fa, err := filepath.Abs(f); err == nil && (fa == abs || strings.HasPrefix(fa, abs+string(filepath.Separator))) {
			continue
		}
		kept = append(kept, f)
	}
	return kept
}

// replaceable checks that writing the tree sd again loses no run: every run it
// holds must have been ingested from one of folders. It returns the IDs it holds.
func replaceable(sd *results.SweepDir, folders []string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(sd.Path, results.RunsDir))
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	reading := map[string]bool{}
	for _, f := range folders {
		if abs, err := filepath.Abs(f); err == nil {
			reading[abs] = true
		}
	}
	refuse := func(why string) error {
		return fmt.Errorf("ingest: %s already holds %s; writing the tree again would lose it. "+
			"Choose another --name, or remove %s first", sd.Path, why, sd.Path)
	}
	var ids []string
	for _, e := range entries {
		m, err := sd.ReadMetrics(e.Name())
		if err != nil {
			if leftover(sd.RunDir(e.Name())) {
				ids = append(ids, e.Name())
				continue
			}
			return nil, refuse(fmt.Sprintf("run %s, which no ingest wrote (it has no readable %s)", e.Name(), results.MetricsFile))
		}
		var sources []string
		switch v := m.Extra[sourceDirsKey].(type) {
		case []any:
			for _, x := range v {
				if s, ok := x.(string); ok {
					sources = append(sources, s)
				}
			}
		}
		if s, ok := m.Extra["source_dir"].(string); ok && len(sources) == 0 {
			sources = []string{s}
		}
		if len(sources) == 0 {
			return nil, refuse(fmt.Sprintf("run %s, measured by a sweep rather than ingested", e.Name()))
		}
		for _, src := range sources {
			if abs, err := filepath.Abs(src); err != nil || !reading[abs] {
				return nil, refuse(fmt.Sprintf("run %s, ingested from %s, which this ingest does not read (give that folder too)", e.Name(), src))
			}
		}
		ids = append(ids, e.Name())
	}
	return ids, nil
}

// leftover reports whether a run directory holds nothing but what an ingest
// killed between writing run_args.json and metrics.json leaves (a sweep's run
// has its logs from its first moments): it is rewritten or removed, not refused.
func leftover(runDir string) bool {
	entries, err := os.ReadDir(runDir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name() != results.RunArgsFile {
			return false
		}
	}
	return true
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
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // a later ingest from another directory must recognize the folder
	}
	// The harness reads this key too: a sweep never takes an ingested run for
	// its own measurement.
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

package ingest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/backends/torchrun"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// legacySettings are the keys of a seed-style metrics.json that are settings;
// they count when no other file of the folder gives them.
var legacySettings = []string{"world_size", "fsdp", "bf16", "fp16", "model"}

// one maps a folder onto a run config and reads its metrics: a seed-style
// metrics.json, or a Hugging Face Trainer output_dir.
func one(dir string, spec []byte, specName string, o Options) (run, *sweeps.Plan, error) {
	r := run{rep: Report{Dir: dir}}
	metricsPath := filepath.Join(dir, torchrun.LegacyMetricsFile)
	var legacy map[string]any
	var trainer *trainerOutput
	var err error
	if regular(metricsPath) {
		if legacy, err = readJSON(metricsPath); err != nil {
			return r, nil, err
		}
	} else if trainer, err = readTrainerOutput(dir); err != nil {
		return r, nil, err
	}

	var entries []entry
	args := map[string]any{}
	argsPath := filepath.Join(dir, RunArgsFile)
	if regular(argsPath) {
		if args, err = readJSON(argsPath); err != nil {
			return r, nil, err
		}
		entries = append(entries, flatten("", args, RunArgsFile)...)
		r.rep.Files = append(r.rep.Files, RunArgsFile)
	}
	// The Trainer takes fsdp_config as an object or as the path of a JSON file.
	if p, ok := args["fsdp_config"].(string); ok && p != "" {
		path := p
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if regular(path) {
			fc, err := readJSON(path)
			if err != nil {
				return r, nil, err
			}
			entries = append(entries, flatten("fsdp_config", fc, filepath.Base(path))...)
			r.rep.Files = append(r.rep.Files, filepath.Base(path))
		} else {
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("fsdp_config names %s, which is not in the folder: its keys are not read", show(p)))
		}
	}
	cfg, read, skipped, err := readConfigs(dir)
	if err != nil {
		return r, nil, fmt.Errorf("ingest: %w", err)
	}
	entries = append(entries, cfg...)
	r.rep.Files = append(r.rep.Files, read...)
	for _, f := range skipped {
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s not read: no distributed_type or fsdp_config, so no accelerate config", f))
	}
	if trainer != nil {
		entries = append(entries, trainer.settings()...)
		r.rep.Files = append(r.rep.Files, trainer.files...)
	}
	for _, k := range legacySettings {
		if v, ok := legacy[k]; ok {
			entries = append(entries, entry{k, v, torchrun.LegacyMetricsFile})
		}
	}
	if legacy != nil {
		r.rep.Files = append(r.rep.Files, torchrun.LegacyMetricsFile)
	}

	mp, err := mapSettings(entries, dir, trainer, o)
	if err != nil {
		return r, nil, fmt.Errorf("ingest: %s: %w", dir, err)
	}
	r.rep.Mapped, r.rep.Unmapped, r.rep.Overridden = mp.mapped, mp.unmapped, mp.overridden
	for _, w := range mp.warnings {
		if !slices.Contains(r.rep.Warnings, w) {
			r.rep.Warnings = append(r.rep.Warnings, w)
		}
	}
	all := make([]string, 0, len(mp.sets)+len(o.Set))
	all = append(all, mp.sets...)
	all = append(all, o.Set...)
	given := mp.given
	for _, s := range o.Set {
		k, _, _ := strings.Cut(s, "=")
		given[strings.TrimSpace(k)] = true
	}
	po := o.Parse
	po.Set = all
	plan, err := sweeps.Parse(spec, specName, po)
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

	var res results.Result
	if legacy != nil {
		res, err = torchrun.LegacyResult(r.rc, metricsPath, o.TrainsModelAxis, func(s string) { r.rep.Warnings = append(r.rep.Warnings, s) })
		if err != nil {
			return r, nil, fmt.Errorf("ingest: %w", err)
		}
		// A seed-style wall_time_s is the script's whole run: start-up, warm-up
		// and a few short steps, never the steady state alone.
		res.WholeRunWallTime = true
	} else {
		res, err = trainer.result(r.rc, given["seq_len"] || o.Spec != "", func(s string) { r.rep.Warnings = append(r.rep.Warnings, s) })
		if err != nil {
			return r, nil, fmt.Errorf("ingest: %s: %w", dir, err)
		}
		if o.TrainsModelAxis {
			flops(&res, r.rc)
		}
		r.lossFirst = trainer.lossFirst()
		r.steps = mp.steps
	}
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	if len(mp.kept) > 0 {
		res.Extra["run_args"] = mp.kept
	}
	if len(mp.fsdp) > 0 {
		res.Extra["fsdp"] = mp.fsdp
	}
	if len(mp.overridden) > 0 {
		res.Extra["overridden_by_set"] = mp.overridden
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // a later ingest from another directory must recognize the folder
	}
	// The harness reads this key too: a sweep never takes an ingested run for
	// its own measurement.
	res.Extra["source_dir"] = dir
	if res.Finished.IsZero() {
		for _, f := range []string{metricsPath, filepath.Join(dir, TrainerAllResults), filepath.Join(dir, TrainerTrainResult)} {
			if st, err := os.Stat(f); err == nil {
				res.Finished = st.ModTime()
				break
			}
		}
	}
	r.res = res
	return r, plan, nil
}

// lossFirst is the first logged loss.
func (t *trainerOutput) lossFirst() *float64 {
	first, _, _, _, _ := t.losses()
	return first
}

// regular reports whether path is a regular file (after links).
func regular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// mapping is what a folder's settings give.
type mapping struct {
	sets       []string        // axis=value, for sweeps' --set
	given      map[string]bool // the axes the folder gives
	mapped     []string        // "key -> axis=value"
	unmapped   []string        // keys that are no axis
	kept       map[string]any  // unmapped keys of run_args.json with their values
	fsdp       map[string]any  // FSDP keys that are no axis (state_dict_type, fsdp_version...)
	overridden []string        // folder values an explicit --set replaced
	warnings   []string
	steps      int // global_step of a Trainer output_dir, 0 if unknown
}

// chosen is an axis's value and the keys that gave it.
type chosen struct {
	value string
	from  []string // "key (file)"
	note  string   // how the value was read, when not as written
}

// mapSettings turns a folder's settings into --set values. Keys map through
// Aliases (and Options.Map); keys no alias knows are listed and kept; an axis
// two keys give differently is an error that names both; an axis that
// Options.Set gives is the --set's, and the folder's value is listed as
// overridden.
func mapSettings(entries []entry, dir string, trainer *trainerOutput, o Options) (*mapping, error) {
	mp := &mapping{given: map[string]bool{}, kept: map[string]any{}, fsdp: map[string]any{}}
	setAxes := map[string]string{}
	for _, s := range o.Set {
		k, v, _ := strings.Cut(s, "=")
		setAxes[strings.TrimSpace(k)] = v
	}
	vals := map[string]*chosen{}
	byKey := map[string]entry{}
	for _, e := range entries {
		if _, dup := byKey[e.key]; !dup {
			byKey[e.key] = e
		}
	}
	var flags []string // bf16 / fp16 keys seen
	for _, e := range entries {
		from := e.key + " (" + e.file + ")"
		if e.key == "model.flavor" {
			if _, ok := byKey["model.name"]; ok {
				continue // read with model.name
			}
		}
		if e.file == torchrun.LegacyMetricsFile && e.key == "model" {
			// A metrics.json's model is often the script's own label
			// ("tiny-mlp-lm"): it names the model axis only when it resolves to
			// a shape; else it stays in the metrics' extra, as it always has.
			if v, isStr := e.val.(string); !isStr || !resolvable(v, dir) {
				continue
			}
		}
		if e.val == nil {
			continue // null: not set (TrainingArguments.to_dict writes every argument, most as null)
		}
		a, ok := lookupAlias(e.key, o.Map)
		if ok && a.Axis == "steps" {
			if x, isNum := e.val.(float64); isNum && x == -1 {
				continue // the Trainer's and Lightning's max_steps -1: no step limit set
			} else if isNum && x <= 0 {
				// Anything else below 1 is no step count (global_step -8 was
				// silently stored as 0 steps measured).
				return nil, fmt.Errorf("%s: %s is no step count (a whole number of at least 1; -1 alone means no limit); "+
					"give --set steps=N", from, show(e.val))
			}
		}
		if ok && a.From == fromTrainerState && e.file != TrainerStateFile {
			// Elsewhere train_batch_size is often the global batch (DeepSpeed's).
			ok = false
		}
		if !ok {
			if _, seen := mp.kept[e.key]; !seen {
				mp.unmapped = append(mp.unmapped, e.key)
				mp.kept[e.key] = e.val
			}
			continue
		}
		if a.Axis == "" {
			mp.fsdp[strings.TrimPrefix(leaf(e.key), "fsdp_")] = e.val
			continue
		}
		axes := strings.Split(a.Axis, ",")
		all := true
		for _, ax := range axes {
			all = all && setAxes[ax] != ""
		}
		if all {
			mp.overridden = append(mp.overridden, fmt.Sprintf("%s=%s -> --set %s=%s", from, show(e.val), axes[0], setAxes[axes[0]]))
			continue
		}
		v := e.val
		if e.key == "model.name" {
			if f, ok := byKey["model.flavor"]; ok {
				v = fmt.Sprint(e.val) + "-" + strings.ToLower(fmt.Sprint(f.val))
			}
		}
		if strings.HasSuffix(e.key, "transformer_layer_cls_to_wrap") {
			mp.fsdp["transformer_layer_cls_to_wrap"] = e.val
		}
		if a.Key == "bf16" || a.Key == "fp16" {
			flags = append(flags, from)
		}
		avs, err := a.convert(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (an explicit --set %s=... replaces the folder's value)", from, err, axes[0])
		}
		for _, av := range avs {
			if sv, ok := setAxes[av.axis]; ok {
				mp.overridden = append(mp.overridden, fmt.Sprintf("%s=%s -> --set %s=%s", from, show(e.val), av.axis, sv))
				continue
			}
			note := ""
			if av.axis == "model" {
				model, how, warn, err := resolveModel(av.value, dir)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", from, err)
				}
				if warn != "" {
					mp.warnings = append(mp.warnings, warn)
				}
				av.value, note = model, how
			}
			if err := merge(vals, av, from); err != nil {
				return nil, err
			}
			if c := vals[av.axis]; note != "" && c.note == "" {
				c.note = note
			}
		}
	}

	if c := vals["sharding"]; c != nil && c.value == fsdpToolDefault {
		c.value, c.note = sweeps.FullShard, "FSDP without a sharding_strategy: the tool's default FULL_SHARD"
	}
	if c := vals["sharding"]; c != nil && c.value == fsdpTrue {
		if o.FSDPSharding == "" {
			var said []string
			for _, k := range keysOf(c.from) {
				if k == "fsdp" {
					said = append(said, "fsdp: true")
				} else {
					said = append(said, k+" (FSDP)")
				}
			}
			return nil, fmt.Errorf("%s does not say which strategy; give it with --fsdp-sharding (full_shard, shard_grad_op, hybrid_shard, no_shard)",
				strings.Join(said, ", "))
		}
		c.value = o.FSDPSharding
	}
	if len(flags) > 0 && vals["mixed_precision"] == nil && setAxes["mixed_precision"] == "" {
		// Neither the bf16 nor the fp16 flag is set: the run was fp32.
		vals["mixed_precision"] = &chosen{value: sweeps.FP32, from: flags}
	}
	if err := nanoGPTAccum(vals, byKey, setAxes); err != nil {
		return nil, err
	}
	folderModel(mp, vals, dir, setAxes)
	if trainer != nil {
		if err := trainerReplicas(mp, vals, trainer, setAxes); err != nil {
			return nil, err
		}
		if c := vals["steps"]; c != nil {
			mp.steps, _ = strconv.Atoi(c.value)
		}
	}

	axes := sortedKeys(vals)
	for _, ax := range axes {
		c := vals[ax]
		mp.sets = append(mp.sets, ax+"="+c.value)
		mp.given[ax] = true
		for _, f := range c.from {
			m := keyOf(f) + " -> " + ax + "=" + c.value
			if c.note != "" {
				m += " (" + c.note + ")"
			}
			if !slices.Contains(mp.mapped, m) {
				mp.mapped = append(mp.mapped, m)
			}
		}
	}
	sort.Strings(mp.mapped)
	if len(mp.kept) == 0 {
		mp.kept = nil
	}
	return mp, nil
}

// merge records av from a key, or checks it against the value another key gave.
// Some pairs are not conflicts: `fsdp: true` (or accelerate's FSDP) with a named
// strategy, two switches of activation checkpointing or offload, and the
// Trainer's auto_wrap (transformer) with min_num_params (a size policy, which
// the Trainer then uses).
func merge(vals map[string]*chosen, av axisValue, from string) error {
	c := vals[av.axis]
	if c == nil {
		vals[av.axis] = &chosen{value: av.value, from: []string{from}}
		return nil
	}
	switch {
	case c.value == av.value:
	case av.axis == "sharding" && c.value == fsdpTrue && av.value != sweeps.DDP,
		av.axis == "sharding" && c.value == fsdpToolDefault && av.value != sweeps.DDP && av.value != fsdpTrue:
		c.value = av.value
	case av.axis == "sharding" && (av.value == fsdpTrue || av.value == fsdpToolDefault) && c.value != sweeps.DDP:
	case (av.axis == "activation_checkpointing" || av.axis == "cpu_offload") && av.value != c.value:
		// Two switches for one thing (the Trainer's gradient_checkpointing and
		// fsdp_config's activation_checkpointing, which it forbids together; the
		// fsdp string's offload and offload_params): either on turns it on.
		c.value = "true"
	case av.axis == "wrap_policy" && c.value == "transformer" && strings.HasPrefix(av.value, "size:"):
		c.value = av.value
	case av.axis == "wrap_policy" && av.value == "transformer" && strings.HasPrefix(c.value, "size:"):
	default:
		shown := func(v string) string {
			if v == fsdpTrue || v == fsdpToolDefault {
				return "FSDP"
			}
			return v
		}
		return fmt.Errorf("%s gives %s=%s but %s gives %s; say which with --set %s=...",
			strings.Join(c.from, ", "), av.axis, shown(c.value), from, shown(av.value), av.axis)
	}
	c.from = append(c.from, from)
	return nil
}

// nanoGPTAccum: nanoGPT's gradient_accumulation_steps is the global count,
// which train.py divides by the world size; a folder with nanoGPT's max_iters
// gives grad_accum per rank only once the world size is known.
func nanoGPTAccum(vals map[string]*chosen, byKey map[string]entry, setAxes map[string]string) error {
	ga := vals["grad_accum"]
	if _, nano := byKey["max_iters"]; !nano || ga == nil || len(ga.from) != 1 || keyOf(ga.from[0]) != "gradient_accumulation_steps" {
		return nil
	}
	ws := setAxes["world_size"]
	if c := vals["world_size"]; c != nil {
		ws = c.value
	}
	w, err1 := strconv.Atoi(strings.TrimSpace(ws))
	g, err2 := strconv.Atoi(ga.value)
	if errors.Join(err1, err2) != nil || w < 1 {
		return fmt.Errorf("%s: nanoGPT's gradient_accumulation_steps counts all ranks and needs the world size to give grad_accum per rank; give --set world_size=N", ga.from[0])
	}
	if g%w != 0 {
		return fmt.Errorf("%s: %d does not divide by world_size %d (nanoGPT's train.py asserts it does)", ga.from[0], g, w)
	}
	ga.value, ga.note = strconv.Itoa(g/w), fmt.Sprintf("nanoGPT's global %d ÷ world_size %d", g, w)
	return nil
}

// resolveModel reads a folder's model value: a preset stays; a Hugging Face id
// becomes its preset; else a config.json (one the value names, a local
// checkout's, or the Hugging Face cache's) gives the shape, as the preset of the
// same dimensions or as the file's path. An empty value reads the folder's own
// config.json (a Trainer output_dir's). note says how; warn is set when the
// value stays a label.
func resolveModel(value, dir string) (model, note, warn string, err error) {
	if value != "" && shapes.IsPreset(value) {
		return value, "", "", nil
	}
	if p, ok := shapes.PresetForHFID(value); ok && value != "" {
		return p, "Hugging Face id " + value, "", nil
	}
	var cands []string
	if value != "" {
		if strings.HasSuffix(strings.ToLower(value), ".json") {
			cands = append(cands, value)
		}
		cands = append(cands, filepath.Join(value, ModelConfigFile))
		if p, ok := shapes.CachedConfig(value); ok {
			cands = append(cands, p)
		}
	} else {
		cands = append(cands, filepath.Join(dir, ModelConfigFile))
	}
	for _, path := range cands {
		if !regular(path) {
			continue
		}
		s, err := shapes.ReadConfig(path)
		if err != nil {
			if value == "" {
				return "", "", fmt.Sprintf("%s is no model config this tool reads (%v); the model axis is not given", path, err), nil
			}
			return "", "", "", fmt.Errorf("model %s: %w", show(value), err)
		}
		if p, ok := shapes.MatchPreset(s); ok {
			return p, "the shape of " + path, "", nil
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		return path, "config.json " + path, "", nil
	}
	if value == "" {
		return "", "", "", nil
	}
	return value, "", fmt.Sprintf("model %s is no preset, no known Hugging Face id, and no config.json of it was found (a checkout it names, or the Hugging Face cache %s): it stays a label the sim and MFU cannot use; give --set model=PRESET (%s)",
		show(value), strings.Join(shapes.HFCacheDirs(), ", "), strings.Join(shapes.Presets(), ", ")), nil
}

// resolvable reports whether a model value resolves to a shape (resolveModel
// gives no warning and no error).
func resolvable(value, dir string) bool {
	_, _, warn, err := resolveModel(value, dir)
	return value != "" && warn == "" && err == nil
}

// folderModel gives the model axis from the folder's config.json when no key did.
func folderModel(mp *mapping, vals map[string]*chosen, dir string, setAxes map[string]string) {
	if setAxes["model"] != "" || vals["model"] != nil {
		return
	}
	model, note, warn, _ := resolveModel("", dir)
	if warn != "" {
		mp.warnings = append(mp.warnings, warn)
	}
	if model != "" {
		vals["model"] = &chosen{value: model, from: []string{ModelConfigFile + " (folder)"}, note: note}
	}
}

// trainerReplicas derives world_size or grad_accum from a Trainer's own figures
// (replicas = world_size × grad_accum) when the folder or --set gives the other,
// or both when the run had one replica.
func trainerReplicas(mp *mapping, vals map[string]*chosen, t *trainerOutput, setAxes map[string]string) error {
	n, ok := t.replicas()
	get := func(axis string) (int, bool) {
		s := setAxes[axis]
		if c := vals[axis]; c != nil {
			s = c.value
		}
		v, err := strconv.Atoi(strings.TrimSpace(s))
		return v, err == nil && s != ""
	}
	ws, hasWS := get("world_size")
	ga, hasGA := get("grad_accum")
	const from = "train_samples_per_second × train_runtime ÷ (max_steps × train_batch_size)"
	switch {
	case !ok:
		if !hasWS {
			return errors.New("the Trainer's files do not give the world size (train_samples_per_second, train_runtime, max_steps, train_batch_size); give --set world_size=N")
		}
	case hasWS && hasGA:
		if ws*ga != n {
			mp.warnings = append(mp.warnings, fmt.Sprintf("world_size %d × grad_accum %d = %d, but the Trainer's figures give %d (%s)", ws, ga, ws*ga, n, from))
		}
	case hasWS:
		if n%ws != 0 {
			return fmt.Errorf("the Trainer's figures give %d replicas (%s), which world_size %d does not divide; check --set world_size", n, from, ws)
		}
		vals["grad_accum"] = &chosen{value: itoa(n / ws), from: []string{from + " = " + itoa(n) + " ÷ world_size"}}
	case hasGA:
		if n%ga != 0 {
			return fmt.Errorf("the Trainer's figures give %d replicas (%s), which grad_accum %d does not divide; give --set world_size=N", n, from, ga)
		}
		vals["world_size"] = &chosen{value: itoa(n / ga), from: []string{from + " = " + itoa(n) + " ÷ grad_accum"}}
	case n == 1:
		vals["world_size"] = &chosen{value: "1", from: []string{from + " = 1"}}
		vals["grad_accum"] = &chosen{value: "1", from: []string{from + " = 1"}}
	default:
		return fmt.Errorf("the Trainer's figures give world_size × grad_accum = %d (%s) but not which is which; give --set world_size=N", n, from)
	}
	if vals["seq_len"] == nil && setAxes["seq_len"] == "" {
		if ws, ok := get("world_size"); ok {
			if seq, ok := t.tokensPerSample(ws); ok {
				vals["seq_len"] = &chosen{value: itoa(seq), from: []string{"train_tokens_per_second × world_size ÷ train_samples_per_second"},
					note: "every sample " + itoa(seq) + " tokens, packed or padded"}
			}
		}
	}
	return nil
}

// keyOf is the key of a "key (file)" source.
func keyOf(from string) string {
	// "key (file)" names the key; a formula with parentheses of its own
	// ("a × b ÷ (c × d) = 8 ÷ world_size") is its own name, whole.
	if i := strings.LastIndex(from, " ("); i >= 0 && strings.HasSuffix(from, ")") {
		return from[:i]
	}
	return from
}

func keysOf(froms []string) []string {
	out := make([]string, len(froms))
	for i, f := range froms {
		out[i] = keyOf(f)
	}
	return out
}

// leaf is a dotted key's last element.
func leaf(key string) string {
	_, l, _ := cutLast(key)
	return l
}

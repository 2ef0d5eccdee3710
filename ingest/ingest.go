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

// Options say how to read the folders.
type Options struct {
	// Name is the sweep name of the tree written (<out>/<Name>/).
	Name string
	// Spec is a sweep spec whose settings fill what a folder does not say (its
	// hardware, seed, model...); empty uses a minimal spec with the defaults.
	Spec string
	// Set are --set overrides applied to every folder, after its own values.
	Set []string
	// Parse are the options the spec is read with, as `sweep` reads it: which
	// backend options name files and programs, and the checks of models,
	// hardware and backends. Ingest fills Set and Dir (the spec file's folder,
	// so its relative script and model paths resolve as they do for a sweep: a
	// script's content is part of the run ID, and an ingested run must get the
	// ID a fresh sweep of the spec gives).
	Parse sweeps.Options
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
	// Files are the files of the folder that were read.
	Files []string
	// Mapped lists "key -> axis=value" for every key that was mapped.
	Mapped []string
	// Overridden lists the folder's values that an explicit --set replaced, as
	// "key (file)=value -> --set axis=value".
	Overridden []string
	// Unmapped are the run_args.json keys that are no axis; they are kept in the
	// metrics' extra.run_args.
	Unmapped []string
	// Defaulted are the axes no key of the folder gave: they come from the spec,
	// --set, or the defaults.
	Defaulted []string
	// Warnings are notes about figures that disagree.
	Warnings []string
}

// Find returns the run folders under dirs, sorted: every directory holding a
// metrics.json, or a Hugging Face Trainer output_dir (all_results.json or
// train_results.json; its checkpoint-N folders hold neither and are not runs).
// A dir may be one run's folder or hold many.
func Find(dirs []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				return nil
			}
			switch e.Name() {
			case torchrun.LegacyMetricsFile, TrainerAllResults, TrainerTrainResult:
				if dir := filepath.Dir(path); !seen[dir] {
					seen[dir] = true
					out = append(out, dir)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ingest: no %s (or a Trainer's %s / %s) under %s", torchrun.LegacyMetricsFile,
			TrainerAllResults, TrainerTrainResult, strings.Join(dirs, ", "))
	}
	sort.Strings(out)
	return out, nil
}

// run is one ingested folder before grouping.
type run struct {
	rc  sweeps.RunConfig
	res results.Result
	rep Report
	// lossFirst and steps are a Trainer output_dir's first logged loss and
	// global_step: its result has no per-step records for Normalize to read them from.
	lossFirst *float64
	steps     int
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
		o.Parse.Dir = filepath.Dir(o.Spec)
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
		trainerFigures(&m, group)
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

// trainerFigures sets the figures of Trainer output_dirs that Normalize reads
// from per-step records, which a Trainer run has none of: the first logged loss
// and the steps run (the medians over the repeats).
func trainerFigures(m *results.Metrics, group []run) {
	var losses, steps []float64
	for _, r := range group {
		if r.lossFirst != nil {
			losses = append(losses, *r.lossFirst)
		}
		if r.steps > 0 {
			steps = append(steps, float64(r.steps))
		}
	}
	if len(losses) > 0 {
		m.LossFirst = results.F64(median(losses))
	}
	if len(steps) > 0 && m.StepsMeasured == 0 {
		m.StepsMeasured = int(median(steps))
	}
}

// median of xs (not empty); xs is reordered.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
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

// readJSON reads a JSON object; syntax errors name file:line:column.
// readJSONNonFinite is readJSON for the files a Python trainer writes with
// json.dump, which puts bare NaN and Infinity in them (a diverged run's losses):
// they are read back as the float values they stand for, and listed.
func readJSONNonFinite(path string) (map[string]any, []contract.NonFinite, error) {
	data, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: %w", err)
	}
	var m map[string]any
	nf, err := contract.DecodeJSON(path, data, &m)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (not a JSON object)", err)
	}
	for _, v := range nf {
		setField(m, v.Field, v.Value)
	}
	return m, nf, nil
}

// setField sets the value at a DecodeJSON field path ("a.b[2].c") in m, where
// the path walks through maps and lists that exist; it leaves m alone otherwise
// (a key holding '.' or '[' cannot be told from a path, and keeps its 0).
func setField(m map[string]any, path string, v float64) {
	var cur any = m
	var set func(any)
	for _, part := range strings.Split(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		obj, ok := cur.(map[string]any)
		if !ok {
			return
		}
		if _, has := obj[key]; !has {
			return
		}
		cur = obj[key]
		k := key
		set = func(x any) { obj[k] = x }
		for rest != "" {
			num, after, ok := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			list, isList := cur.([]any)
			if !ok || err != nil || !isList || i < 0 || i >= len(list) {
				return
			}
			cur = list[i]
			set = func(x any) { list[i] = x }
			rest = strings.TrimPrefix(after, "[")
		}
	}
	if set != nil {
		set(v)
	}
}

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

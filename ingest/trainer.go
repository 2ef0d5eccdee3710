package ingest

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Files of a Hugging Face Trainer output_dir (Trainer.save_state and
// Trainer.save_metrics): trainer_state.json holds TrainerState (train_batch_size,
// global_step, max_steps, log_history...), train_results.json the train split's
// metrics and all_results.json every split's, merged.
const (
	TrainerStateFile   = "trainer_state.json"
	TrainerAllResults  = "all_results.json"
	TrainerTrainResult = "train_results.json"
	// ModelConfigFile is the model's config.json, which Trainer.save_model writes
	// beside the weights; a run folder may hold one too.
	ModelConfigFile = "config.json"
)

// trainerOutput is what a Trainer output_dir says about its run.
type trainerOutput struct {
	state   map[string]any // trainer_state.json
	metrics map[string]any // train_results.json over all_results.json
	// source names the file each of metrics' train figures came from, for
	// errors about it.
	source map[string]string
	files  []string // the files read
	// diverged says where a loss is NaN or infinite (what the Trainer writes
	// for a diverged run); empty when none is.
	diverged string
	// warnings are about the files as read, for the folder's report.
	warnings []string
}

// trainFigures are the train metrics ingest reads from a Trainer's results files.
var trainFigures = []string{"train_runtime", "train_samples_per_second", "train_tokens_per_second"}

// readTrainerOutput reads a Trainer output_dir's state and metrics.
func readTrainerOutput(dir string) (*trainerOutput, error) {
	t := &trainerOutput{metrics: map[string]any{}, source: map[string]string{}}
	var files []resultsFile
	for _, f := range []string{TrainerAllResults, TrainerTrainResult} {
		path := filepath.Join(dir, f)
		m, nf, err := readJSONNonFinite(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		t.noteNonFinite(nf)
		t.files = append(t.files, f)
		used := false
		for _, k := range trainFigures {
			_, has := m[k]
			used = used || has
		}
		if !used {
			// Listed as read, it would seem to have counted.
			t.warnings = append(t.warnings, fmt.Sprintf("%s holds none of %s: nothing in it was used", f, strings.Join(trainFigures, ", ")))
			for k, v := range m {
				t.metrics[k] = v // kept in the run's extra all the same
			}
			continue
		}
		files = append(files, resultsFile{name: f, m: m, bad: badFigures(m)})
	}
	t.mergeResults(files)
	path := filepath.Join(dir, TrainerStateFile)
	st, nf, err := readJSONNonFinite(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st = map[string]any{}
	case err != nil:
		return nil, err
	default:
		t.noteNonFinite(nf)
		t.files = append(t.files, TrainerStateFile)
	}
	t.state = st
	// The last log_history entry repeats the train metrics: take them from there
	// when the results files lack them (a run killed after save_state).
	if hist, ok := st["log_history"].([]any); ok && len(hist) > 0 {
		if last, ok := hist[len(hist)-1].(map[string]any); ok {
			for k, v := range last {
				if _, has := t.metrics[k]; !has && (k == "train_runtime" || k == "train_samples_per_second" || k == "train_tokens_per_second" || k == "train_loss") {
					t.metrics[k] = v
				}
			}
		}
	}
	return t, nil
}

// resultsFile is one of a Trainer output_dir's results files that gives train
// figures; bad says why its figures cannot be a run's ("" when they can).
type resultsFile struct {
	name string
	m    map[string]any
	bad  string
}

// trainFigureRange is each train figure's plausible range (train_runtime must be
// positive besides).
var trainFigureRange = map[string][2]float64{
	"train_runtime":            {0, backends.MaxWallS},
	"train_samples_per_second": {0, backends.MaxTokens},
	"train_tokens_per_second":  {0, backends.MaxTokens},
}

// badFigures says what is wrong with a results file's train figures, or "".
func badFigures(m map[string]any) string {
	var why []string
	for _, k := range trainFigures {
		r := trainFigureRange[k]
		x, has, err := number(m, k, r[0], r[1])
		switch {
		case err != nil:
			why = append(why, err.Error())
		case has && k == "train_runtime" && x <= 0:
			why = append(why, fmt.Sprintf("train_runtime is %v, not a positive wall time", x))
		}
	}
	return strings.Join(why, "; ")
}

// mergeResults takes the train figures from the results files read: the
// Trainer writes the same train metrics into all_results.json (every split's,
// merged) and train_results.json (the train split's), so train_results.json's
// are used, but a file whose figures cannot be a run's (edited, or left by
// another run) gives way to a sane one, and when the two disagree the folder's
// report says which was used and why the other was not: neither is dropped
// without a word.
func (t *trainerOutput) mergeResults(files []resultsFile) {
	used := files
	if len(files) == 2 {
		a, b := files[0], files[1] // all_results.json, train_results.json
		switch {
		case a.bad != "" && b.bad == "":
			used = []resultsFile{b}
			t.warnings = append(t.warnings, fmt.Sprintf("the train figures are %s's; %s's were not used: %s", b.name, a.name, a.bad))
		case b.bad != "" && a.bad == "":
			used = []resultsFile{a}
			t.warnings = append(t.warnings, fmt.Sprintf("the train figures are %s's; %s's were not used: %s", a.name, b.name, b.bad))
		case a.bad == "" && b.bad == "":
			var differ []string
			for _, k := range trainFigures {
				va, hasA := a.m[k]
				vb, hasB := b.m[k]
				if hasA && hasB && va != vb {
					differ = append(differ, fmt.Sprintf("%s %v against %v", k, vb, va))
				}
			}
			if len(differ) > 0 {
				t.warnings = append(t.warnings, fmt.Sprintf("%s and %s disagree (%s): the figures used are %s's, the train split's own file; were they written by one run?",
					b.name, a.name, strings.Join(differ, ", "), b.name))
			}
		}
	}
	for _, f := range used {
		for k, v := range f.m {
			t.metrics[k] = v
			if _, ok := trainFigureRange[k]; ok {
				t.source[k] = f.name
			}
		}
	}
	// A dropped file's other keys (eval metrics of all_results.json) are kept,
	// as they were; its train figures are not.
	for _, f := range files {
		if len(used) == 1 && f.name != used[0].name {
			for k, v := range f.m {
				if _, fig := trainFigureRange[k]; !fig {
					if _, has := t.metrics[k]; !has {
						t.metrics[k] = v
					}
				}
			}
		}
	}
}

// number is the package's number for a train figure, its error naming the file
// the figure came from.
func (t *trainerOutput) number(key string) (float64, bool, error) {
	r := trainFigureRange[key]
	x, has, err := number(t.metrics, key, r[0], r[1])
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", t.from(key), err)
	}
	return x, has, nil
}

// from names the file a train figure came from.
func (t *trainerOutput) from(key string) string {
	if f := t.source[key]; f != "" {
		return f
	}
	return TrainerStateFile + " (the last log_history entry)"
}

// noteNonFinite records the first non-finite loss: the run diverged. Other
// non-finite figures (a grad_norm of inf on a step the loss scaler skipped) say
// nothing about the run's end and are kept as they are.
func (t *trainerOutput) noteNonFinite(nf []contract.NonFinite) {
	for _, v := range nf {
		if t.diverged == "" && strings.HasSuffix(v.Field, "loss") {
			t.diverged = fmt.Sprintf("the Trainer recorded a %v loss (%s at %s): the run diverged", v.Value, v.Field, v.Pos)
		}
	}
}

// settings are the axes a Trainer output_dir gives: the per-device batch and the
// steps from trainer_state.json.
func (t *trainerOutput) settings() []entry {
	var out []entry
	for _, k := range []string{"train_batch_size", "global_step"} {
		if v, ok := t.state[k]; ok {
			out = append(out, entry{k, v, TrainerStateFile})
		}
	}
	return out
}

// replicas is world_size × grad_accum as the Trainer's own figures give it:
// train_samples_per_second × train_runtime samples over max_steps steps of
// train_batch_size per device. ok is false when the figures are missing or
// give no whole number (an epoch-based run's last batch is short).
func (t *trainerOutput) replicas() (n int, ok bool) {
	runtime, has1, err1 := number(t.metrics, "train_runtime", 0, backends.MaxWallS)
	sps, has2, err2 := number(t.metrics, "train_samples_per_second", 0, backends.MaxTokens)
	bs, has3, err3 := number(t.state, "train_batch_size", 1, maxInt)
	steps, has4, err4 := number(t.state, "max_steps", 1, maxInt)
	if !has4 {
		steps, has4, err4 = number(t.state, "global_step", 1, maxInt)
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil || !(has1 && has2 && has3 && has4) {
		return 0, false
	}
	x := sps * runtime / (steps * bs)
	r := math.Round(x)
	// The Trainer rounds samples/s to 3 decimals and the runtime to 4.
	if r < 1 || math.Abs(x-r) > 0.02*r || r > maxInt {
		return 0, false
	}
	return int(r), true
}

// tokensPerSample is the sequence length the Trainer's figures give when it
// counted tokens too: train_tokens_per_second (per device) × world size over
// train_samples_per_second (all devices). ok is false without both figures or
// when samples differ in length (no whole number within 2%).
func (t *trainerOutput) tokensPerSample(worldSize int) (int, bool) {
	tps, has1, err1 := number(t.metrics, "train_tokens_per_second", 0, backends.MaxTokens)
	sps, has2, err2 := number(t.metrics, "train_samples_per_second", 0, backends.MaxTokens)
	if errors.Join(err1, err2) != nil || !has1 || !has2 || sps <= 0 || worldSize < 1 {
		return 0, false
	}
	x := tps * float64(worldSize) / sps
	r := math.Round(x)
	if r < 1 || r > maxInt || math.Abs(x-r) > 0.02*r {
		return 0, false
	}
	return int(r), true
}

// result makes the run's result: tokens over train_runtime, which spans the
// whole training loop (data loading, the first slow steps, logging, saving), so
// the result is marked WholeRunWallTime. Tokens per rank are
// train_tokens_per_second × train_runtime when the Trainer counted them
// (include_tokens_per_second; per device, as TrainingArguments documents), else
// the samples times seq_len, which needs seq_len given (seqGiven).
func (t *trainerOutput) result(rc sweeps.RunConfig, seqGiven bool, warn func(string)) (results.Result, error) {
	for _, w := range t.warnings {
		warn(w)
	}
	res := results.Result{Status: results.StatusOK, WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), WholeRunWallTime: true}
	if t.diverged != "" {
		res.Status, res.Error = results.StatusDiverged, t.diverged
		res.Extra = map[string]any{"trainer_files": t.files}
		return res, nil
	}
	runtime, ok, err := t.number("train_runtime")
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("no train_runtime in %s, %s or the last log_history entry: a throughput needs the run's wall time", TrainerAllResults, TrainerTrainResult)
	}
	if runtime <= 0 {
		return res, fmt.Errorf("%s: train_runtime is %v: a throughput needs the run's wall time, a positive number of seconds", t.from("train_runtime"), runtime)
	}
	tps, hasTPS, err := t.number("train_tokens_per_second")
	if err != nil {
		return res, err
	}
	sps, hasSPS, err := t.number("train_samples_per_second")
	if err != nil {
		return res, err
	}
	var tokensPerRank float64
	switch {
	case hasTPS && tps > 0:
		tokensPerRank = tps * runtime
		if hasSPS && sps > 0 && seqGiven {
			// Both figures given: they must tell the same throughput, as a
			// metrics.json's two figures must (torchrun.LegacyResult).
			fromSamples := sps * float64(rc.SeqLen) / float64(rc.WorldSize)
			if r := tps / fromSamples; r > 1.5 || r < 1/1.5 {
				warn(fmt.Sprintf("train_tokens_per_second %.4g (per device) and train_samples_per_second %.4g × seq_len %d ÷ world_size %d = %.4g disagree %.3g×; "+
					"the table uses train_tokens_per_second: check seq_len and world_size (--set), or whether the run counted padding tokens",
					tps, sps, rc.SeqLen, rc.WorldSize, fromSamples, max(r, 1/r)))
			}
		}
	case hasSPS && sps > 0 && seqGiven:
		tokensPerRank = sps * runtime * float64(rc.SeqLen) / float64(rc.WorldSize)
	case hasSPS && sps > 0 && hasTPS:
		return res, fmt.Errorf("%s: train_tokens_per_second is 0, and train_samples_per_second needs the tokens per sample: give --set seq_len=N", t.from("train_tokens_per_second"))
	case hasSPS && sps > 0:
		return res, fmt.Errorf("train_tokens_per_second is absent (the run did not set include_tokens_per_second) and train_samples_per_second needs the tokens per sample: give --set seq_len=N")
	case hasSPS || hasTPS:
		// Present and zero: no seq_len can make a throughput of them.
		var zero []string
		for _, k := range []string{"train_tokens_per_second", "train_samples_per_second"} {
			if _, has := t.metrics[k]; has {
				zero = append(zero, fmt.Sprintf("%s is 0 (%s)", k, t.from(k)))
			}
		}
		return res, fmt.Errorf("%s over a train_runtime of %vs: the run recorded no throughput (did it train any step?); there is nothing to ingest, leave the folder out",
			strings.Join(zero, " and "), runtime)
	default:
		return res, fmt.Errorf("neither train_tokens_per_second nor train_samples_per_second is in %s or %s", TrainerAllResults, TrainerTrainResult)
	}
	if tokensPerRank > backends.MaxTokens || tokensPerRank < 1 {
		return res, fmt.Errorf("the figures give %g tokens per rank, outside [1, %g]", tokensPerRank, float64(backends.MaxTokens))
	}
	res.MeasuredWallS = runtime
	tokens := int64(math.Round(tokensPerRank))
	for r := range rc.WorldSize {
		res.PerRank = append(res.PerRank, results.RankResult{Rank: r, MeasuredWallS: runtime, Tokens: tokens})
	}
	first, last, lrFirst, lrLast, n := t.losses()
	if last != nil && len(res.PerRank) > 0 {
		res.PerRank[0].LossLast = last
	}
	extra := map[string]any{}
	for _, k := range sortedKeys(t.metrics) {
		extra[k] = t.metrics[k]
	}
	for _, k := range []string{"global_step", "max_steps", "num_train_epochs", "logging_steps", "total_flos", "num_input_tokens_seen"} {
		if v, ok := t.state[k]; ok {
			extra["state."+k] = v
		}
	}
	extra["log_history_losses"] = n
	if first != nil {
		extra["loss_first"] = *first
	}
	if lrFirst != nil {
		extra["learning_rate_first"], extra["learning_rate_last"] = *lrFirst, *lrLast
	}
	res.Extra = map[string]any{"trainer": extra, "trainer_files": t.files}
	return res, nil
}

// losses reads the log_history's loss and learning_rate entries (one per
// logging step): the first and last loss and learning rate, and how many losses.
func (t *trainerOutput) losses() (first, last, lrFirst, lrLast *float64, n int) {
	hist, _ := t.state["log_history"].([]any)
	for _, h := range hist {
		e, ok := h.(map[string]any)
		if !ok {
			continue
		}
		if l, ok := e["loss"].(float64); ok && !math.IsNaN(l) && !math.IsInf(l, 0) {
			if first == nil {
				first = results.F64(l)
			}
			last = results.F64(l)
			n++
		}
		if lr, ok := e["learning_rate"].(float64); ok {
			if lrFirst == nil {
				lrFirst = results.F64(lr)
			}
			lrLast = results.F64(lr)
		}
	}
	return first, last, lrFirst, lrLast, n
}

// flops sets the model FLOPs per token from the model axis's shape (when it is
// the model the run trained) and the peak of the hardware profile, for MFU.
func flops(res *results.Result, rc sweeps.RunConfig) {
	shape, err := shapes.Lookup(rc.Model)
	if err != nil {
		return
	}
	res.ModelFlopsPerToken = shape.FlopsPerToken(rc.SeqLen)
	res.Env.ModelParams = shape.Params()
	if p, err := hardware.Lookup(rc.Hardware); err == nil && rc.Hardware != hardware.Auto {
		if peak, err := p.Peak(rc.MixedPrecision); err == nil {
			res.PeakFlopsPerS = peak
			res.Env.Hardware = p.Name
		}
	}
}

// itoa is strconv.Itoa, for the settings derived here.
func itoa(n int) string { return strconv.Itoa(n) }

package contract

import (
	"errors"
	"fmt"

	"github.com/aclements/go-moremath/stats"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// CheckpointDir is where a run's checkpoints go, inside its run directory (one
// folder per save, step-<measured step>), for every backend that writes them.
const CheckpointDir = "checkpoint"

// CheckpointFigures are a rank file's checkpoint keys (sweeps' checkpoint
// axis): checkpoint_save_s lists each save's wall time on this rank, in order;
// checkpoint_bytes is what this rank wrote for the last checkpoint;
// checkpoint_load_s and resume_exact come with resume_check (the first
// checkpoint reloaded into a fresh model, and whether the losses after it equal
// the uninterrupted run's bit for bit).
type CheckpointFigures struct {
	CheckpointSaveS []float64 `json:"checkpoint_save_s"`
	CheckpointBytes *int64    `json:"checkpoint_bytes"`
	CheckpointLoadS *float64  `json:"checkpoint_load_s"`
	ResumeExact     *bool     `json:"resume_exact"`
}

// checkCheckpoint bounds a rank's checkpoint keys and checks that they fit the
// run: as many saves as it makes, and the resume check's figures when asked for.
func checkCheckpoint(rc sweeps.RunConfig, f CheckpointFigures) error {
	if !rc.Checkpoints() {
		if f.CheckpointSaveS != nil || f.CheckpointBytes != nil || f.CheckpointLoadS != nil || f.ResumeExact != nil {
			return errors.New("checkpoint figures are reported, but the run does not checkpoint (checkpoint: none)")
		}
		return nil
	}
	if f.CheckpointSaveS == nil && f.CheckpointBytes == nil {
		return nil // a script that does not checkpoint: the figures stay unknown
	}
	if want := rc.Steps / max(rc.CheckpointEvery, 1); len(f.CheckpointSaveS) != want {
		return fmt.Errorf("checkpoint_save_s holds %d saves; the run saves %d (every %d of %d steps)", len(f.CheckpointSaveS), want, rc.CheckpointEvery, rc.Steps)
	}
	for i, s := range f.CheckpointSaveS {
		if err := backends.CheckTime(fmt.Sprintf("checkpoint_save_s[%d]", i), s, results.MaxCheckpointS); err != nil {
			return err
		}
	}
	if f.CheckpointBytes == nil {
		return errors.New("checkpoint_bytes is missing beside checkpoint_save_s")
	}
	if err := backends.CheckFigure("checkpoint_bytes", float64(*f.CheckpointBytes), 0, backends.MaxBytes, false); err != nil {
		return err
	}
	if f.CheckpointLoadS != nil {
		if err := backends.CheckTime("checkpoint_load_s", *f.CheckpointLoadS, results.MaxCheckpointS); err != nil {
			return err
		}
	}
	if rc.ResumeCheck && (f.CheckpointLoadS == nil || f.ResumeExact == nil) {
		return errors.New("resume_check is on, but checkpoint_load_s or resume_exact is missing")
	}
	return nil
}

// readCheckpoint fills res's checkpoint figures from the ranks' keys: a save
// lasts as long as its slowest rank and the figure is the median save; bytes
// add up over ranks; resume is exact when it is on every rank.
func readCheckpoint(res *results.Result, files []RankFile) {
	if len(files) == 0 || files[0].CheckpointBytes == nil {
		return
	}
	saves := make([]float64, len(files[0].CheckpointSaveS))
	var total, largest int64
	var load *float64
	var exact *bool
	for r, f := range files {
		if f.CheckpointBytes == nil || len(f.CheckpointSaveS) != len(saves) {
			return // some rank did not report: unknown rather than a partial sum
		}
		for i, s := range f.CheckpointSaveS {
			saves[i] = max(saves[i], s)
		}
		total += *f.CheckpointBytes
		largest = max(largest, *f.CheckpointBytes)
		if f.CheckpointLoadS != nil && (load == nil || *f.CheckpointLoadS > *load) {
			load = f.CheckpointLoadS
		}
		if f.ResumeExact != nil {
			e := *f.ResumeExact && (exact == nil || *exact)
			exact = &e
		}
		res.PerRank[r].CheckpointBytes = f.CheckpointBytes
		if len(f.CheckpointSaveS) > 0 {
			res.PerRank[r].CheckpointSaveS = results.F64(Median(f.CheckpointSaveS))
		}
	}
	if len(saves) > 0 {
		res.CheckpointSaveS = results.F64(Median(saves))
	}
	res.CheckpointBytes, res.CheckpointBytesPerRank = results.I64(total), results.I64(largest)
	res.CheckpointLoadS, res.ResumeExact = load, exact
}

// Median is the median of a non-empty sample (go-moremath's quantile 0.5).
func Median(xs []float64) float64 {
	return stats.Sample{Xs: xs}.Copy().Sort().Quantile(0.5)
}

// checkpointKind is the run's checkpoint axis value for templates: none for a
// config stored before the axis.
func checkpointKind(rc sweeps.RunConfig) string {
	if !rc.Checkpoints() {
		return sweeps.CheckpointNone
	}
	return rc.Checkpoint
}

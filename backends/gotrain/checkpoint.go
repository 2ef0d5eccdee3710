package gotrain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// CheckpointReport is what a rank reports about the checkpoint phase in its
// RankFile (issue 17 §2).
type CheckpointReport struct {
	// SaveS is each save's wall time on this rank, the collective's whole length
	// (gathers, writes and fsync included), in save order.
	SaveS []float64 `json:"save_s"`
	// Bytes is what this rank wrote for the last checkpoint: its shard file (and
	// meta.json on rank 0) when sharded; full.bin and meta.json on rank 0, 0
	// elsewhere, when full.
	Bytes int64 `json:"bytes"`
	// LoadS is the resume check's load into a fresh trainer; ResumedLosses the
	// losses of the steps trained after it, and ResumeExact whether they equal
	// the uninterrupted run's bit for bit.
	LoadS         float64   `json:"load_s,omitempty"`
	ResumedLosses []float64 `json:"resumed_losses,omitempty"`
	ResumeExact   *bool     `json:"resume_exact,omitempty"`
}

// checkpointer saves a run's checkpoints and checks resuming from the first.
type checkpointer struct {
	rc     sweeps.RunConfig
	root   string // <run dir>/checkpoint
	rank   int
	report CheckpointReport
	first  string // the first save: the resume check's source
	last   string
}

func newCheckpointer(rc sweeps.RunConfig, runDir string, rank int) *checkpointer {
	if !rc.Checkpoints() {
		return nil
	}
	return &checkpointer{rc: rc, root: filepath.Join(runDir, contract.CheckpointDir), rank: rank}
}

// due reports whether a save follows measured step m (1-based).
func (c *checkpointer) due(m int) bool {
	return c != nil && c.rc.CheckpointEvery > 0 && m%c.rc.CheckpointEvery == 0
}

// save writes the checkpoint after measured step m. Every rank calls it. Rank 0
// then removes the previous save, unless it is the resume check's source, so a
// long run keeps at most two checkpoints on disk.
func (c *checkpointer) save(ctx context.Context, tr *fsdp.Trainer, m int) error {
	dir := filepath.Join(c.root, "step-"+strconv.Itoa(m))
	start := time.Now()
	var err error
	if c.rc.Checkpoint == sweeps.CheckpointFull {
		err = tr.SaveFull(ctx, dir)
	} else {
		err = tr.SaveSharded(ctx, dir)
	}
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: %s checkpoint after measured step %d: %w", c.rank, c.rc.Checkpoint, m, err)
	}
	c.report.SaveS = append(c.report.SaveS, time.Since(start).Seconds())
	if c.report.Bytes, err = c.bytesWritten(dir); err != nil {
		return err
	}
	prev := c.last
	c.last = dir
	if c.first == "" {
		c.first = dir
	}
	if c.rank == 0 && prev != "" && (prev != c.first || !c.rc.ResumeCheck) {
		if err := os.RemoveAll(prev); err != nil {
			return fmt.Errorf("gotrain worker: remove the superseded checkpoint %s: %w", prev, err)
		}
	}
	return nil
}

// bytesWritten is the size of the files this rank wrote into dir.
func (c *checkpointer) bytesWritten(dir string) (int64, error) {
	var names []string
	switch {
	case c.rc.Checkpoint == sweeps.CheckpointSharded:
		names = append(names, fmt.Sprintf("shard-rank%d.bin", c.rank))
		if c.rank == 0 {
			names = append(names, fsdp.MetaFile)
		}
	case c.rank == 0:
		names = append(names, fsdp.FullFile, fsdp.MetaFile)
	}
	var n int64
	for _, name := range names {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return 0, fmt.Errorf("gotrain worker: rank %d: size of its checkpoint file: %w", c.rank, err)
		}
		n += st.Size()
	}
	return n, nil
}

// resume is the resume check: a fresh trainer (newTrainer) loads the first
// checkpoint and trains the measured steps that followed it; their losses must
// equal want (the uninterrupted run's, from that step on) bit for bit.
func (c *checkpointer) resume(ctx context.Context, newTrainer func() (*fsdp.Trainer, error), want []float64) error {
	if c == nil || !c.rc.ResumeCheck {
		return nil
	}
	tr, err := newTrainer()
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: a fresh trainer for the resume check: %w", c.rank, err)
	}
	defer tr.Close()
	start := time.Now()
	if c.rc.Checkpoint == sweeps.CheckpointFull {
		err = tr.LoadFull(ctx, c.first)
	} else {
		err = tr.LoadSharded(ctx, c.first)
	}
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: resume check: load %s: %w", c.rank, c.first, err)
	}
	c.report.LoadS = time.Since(start).Seconds()
	exact := true
	for i := range want {
		rep, err := tr.Step(ctx)
		if err != nil {
			return fmt.Errorf("gotrain worker: rank %d: resume check, step %d after the checkpoint: %w", c.rank, i+1, err)
		}
		c.report.ResumedLosses = append(c.report.ResumedLosses, rep.Loss)
		exact = exact && math.Float64bits(rep.Loss) == math.Float64bits(want[i])
	}
	c.report.ResumeExact = &exact
	return nil
}

// checkCheckpointReport bounds what a rank file says about checkpointing.
func checkCheckpointReport(c *CheckpointReport, rc sweeps.RunConfig) error {
	if !rc.Checkpoints() {
		if c != nil {
			return errors.New("checkpoint is reported, but the run does not checkpoint")
		}
		return nil
	}
	if c == nil {
		return fmt.Errorf("checkpoint is missing, but the run saves %s checkpoints", rc.Checkpoint)
	}
	if want := rc.Steps / rc.CheckpointEvery; len(c.SaveS) != want {
		return fmt.Errorf("checkpoint.save_s has %d saves, the run makes %d", len(c.SaveS), want)
	}
	for i, s := range c.SaveS {
		if err := backends.CheckTime(fmt.Sprintf("checkpoint.save_s[%d]", i), s, results.MaxCheckpointS); err != nil {
			return err
		}
	}
	if err := backends.CheckFigure("checkpoint.bytes", float64(c.Bytes), 0, backends.MaxBytes, false); err != nil {
		return err
	}
	if !rc.ResumeCheck {
		return nil
	}
	if err := backends.CheckTime("checkpoint.load_s", c.LoadS, results.MaxCheckpointS); err != nil {
		return err
	}
	if want := rc.Steps - rc.CheckpointEvery; len(c.ResumedLosses) != want || c.ResumeExact == nil {
		return fmt.Errorf("checkpoint: %d resumed losses (want %d) and resume_exact %v", len(c.ResumedLosses), want, c.ResumeExact)
	}
	return nil
}

// collectCheckpoint fills res's checkpoint figures from the ranks' reports: a
// save lasts as long as its slowest rank, and the figure is the median save.
func collectCheckpoint(res *results.Result, rc sweeps.RunConfig, files []RankFile) {
	if !rc.Checkpoints() {
		return
	}
	saves := make([]float64, len(files[0].Checkpoint.SaveS))
	var total, largest int64
	var load float64
	exact := true
	for r, f := range files {
		c := f.Checkpoint
		for i, s := range c.SaveS {
			saves[i] = max(saves[i], s)
		}
		total += c.Bytes
		largest = max(largest, c.Bytes)
		load = max(load, c.LoadS)
		if c.ResumeExact != nil {
			exact = exact && *c.ResumeExact
		}
		res.PerRank[r].CheckpointBytes = results.I64(c.Bytes)
		res.PerRank[r].CheckpointSaveS = results.F64(contract.Median(c.SaveS))
	}
	res.CheckpointSaveS = results.F64(contract.Median(saves))
	res.CheckpointBytes, res.CheckpointBytesPerRank = results.I64(total), results.I64(largest)
	if rc.ResumeCheck {
		res.CheckpointLoadS = results.F64(load)
		res.ResumeExact = &exact
	}
}

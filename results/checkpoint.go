package results

import (
	"fmt"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"math"
)

// Checkpoint figures (issue 17 §2), as metrics.json names them.
const (
	SampleCheckpointSaveS = "checkpoint_save_s"
	SampleCheckpointLoadS = "checkpoint_load_s"
)

// MaxCheckpointS bounds a save or a load: a day, past the time to write a
// trillion-parameter model's states over a slow link.
const MaxCheckpointS = 24 * 3600.0

// checkpointFigures are one repeat's checkpoint figures; nil = unknown.
type checkpointFigures struct {
	saveS, loadS        *float64
	bytes, bytesPerRank *int64
	resumeExact         *bool
}

func checkpointOf(r Result) checkpointFigures {
	f := checkpointFigures{saveS: r.CheckpointSaveS, loadS: r.CheckpointLoadS, bytes: r.CheckpointBytes,
		bytesPerRank: r.CheckpointBytesPerRank, resumeExact: r.ResumeExact}
	if f.bytesPerRank == nil {
		for _, pr := range r.PerRank {
			f.bytesPerRank = maxPtr(f.bytesPerRank, pr.CheckpointBytes)
		}
	}
	if f.bytes == nil && len(r.PerRank) > 0 && len(r.PerRank) == r.WorldSize {
		var sum int64
		for _, pr := range r.PerRank {
			if pr.CheckpointBytes == nil {
				return f
			}
			sum += *pr.CheckpointBytes
		}
		f.bytes = &sum
	}
	return f
}

// normalizeCheckpoint fills the checkpoint figures from the ok repeats: save and
// load times are the median over repeats (with their samples), bytes the
// largest repeat's, and resume_exact is false when any repeat resumed inexactly.
func normalizeCheckpoint(m *Metrics, ok []Result, samples map[string][]float64) {
	var saves, loads []float64
	for _, r := range ok {
		f := checkpointOf(r)
		if f.saveS != nil {
			saves = append(saves, *f.saveS)
		}
		if f.loadS != nil {
			loads = append(loads, *f.loadS)
		}
		m.CheckpointBytes = maxPtr(m.CheckpointBytes, f.bytes)
		m.CheckpointBytesPerRank = maxPtr(m.CheckpointBytesPerRank, f.bytesPerRank)
		if f.resumeExact != nil {
			exact := *f.resumeExact && (m.ResumeExact == nil || *m.ResumeExact)
			m.ResumeExact = &exact
		}
	}
	if len(saves) > 0 {
		samples[SampleCheckpointSaveS] = saves
		m.CheckpointSaveS = F64(median(saves))
	}
	if len(loads) > 0 {
		samples[SampleCheckpointLoadS] = loads
		m.CheckpointLoadS = F64(median(loads))
	}
}

// checkCheckpoint bounds the checkpoint figures of metrics.json; it returns the
// field and why, or "".
func checkCheckpoint(m *Metrics) (string, string) {
	for _, f := range []struct {
		name string
		v    *float64
	}{{"checkpoint_save_s", m.CheckpointSaveS}, {"checkpoint_load_s", m.CheckpointLoadS}} {
		if f.v != nil {
			if err := inRange(*f.v, 0, MaxCheckpointS); err != "" {
				return f.name, err
			}
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"checkpoint_bytes", m.CheckpointBytes}, {"checkpoint_bytes_per_rank", m.CheckpointBytesPerRank}} {
		if f.v != nil && (*f.v <= 0 || *f.v > MaxMemBytes) {
			return f.name, fmt.Sprintf("%d is not between 1 and %d (1 PiB)", *f.v, MaxMemBytes)
		}
	}
	if t, p := m.CheckpointBytes, m.CheckpointBytesPerRank; t != nil && p != nil && *p > *t {
		return "checkpoint_bytes_per_rank", fmt.Sprintf("%d is more than the whole checkpoint's %d bytes", *p, *t)
	}
	for i, pr := range m.PerRank {
		if pr.CheckpointBytes != nil && (*pr.CheckpointBytes < 0 || *pr.CheckpointBytes > MaxMemBytes) {
			return fmt.Sprintf("per_rank[%d].checkpoint_bytes", i), fmt.Sprintf("%d is not between 0 and %d (1 PiB)", *pr.CheckpointBytes, MaxMemBytes)
		}
		if pr.CheckpointSaveS != nil {
			if err := inRange(*pr.CheckpointSaveS, 0, MaxCheckpointS); err != "" {
				return fmt.Sprintf("per_rank[%d].checkpoint_save_s", i), err
			}
		}
	}
	for _, h := range []struct {
		name string
		v    *float64
	}{{SampleCheckpointSaveS, m.CheckpointSaveS}, {SampleCheckpointLoadS, m.CheckpointLoadS}} {
		xs := m.Samples[h.name]
		if len(xs) == 0 {
			continue
		}
		if h.v == nil {
			return "samples." + h.name, "has values but " + h.name + " is unknown"
		}
		if want := median(xs); math.Abs(want-*h.v) > 1e-9*math.Max(math.Abs(want), math.Abs(*h.v)) {
			return h.name, fmt.Sprintf("%g is not the median %g of its samples", *h.v, want)
		}
	}
	return "", ""
}

// resumeExactValue is the resume_exact column: 1 when the resumed losses equal
// the uninterrupted ones bit for bit, 0 when not, so a gate rule
// (resume_exact>=1) can hold it.
func resumeExactValue(m *Metrics) any {
	if m.ResumeExact == nil {
		return nil
	}
	if *m.ResumeExact {
		return int64(1)
	}
	return int64(0)
}

// maxPtr is the larger of two optional figures; nil when both are unknown.
func maxPtr(a, b *int64) *int64 {
	if a == nil || (b != nil && *b > *a) {
		return b
	}
	return a
}

// checkpointKind is the run's checkpoint axis value; a config stored before the
// axis existed has none.
func checkpointKind(rc *sweeps.RunConfig) string {
	if !rc.Checkpoints() {
		return sweeps.CheckpointNone
	}
	return rc.Checkpoint
}

// checkpointUnits are the checkpoint figures in benchfmt output, when an ok run
// has them (so output without checkpointing is as it was).
func checkpointUnits(runs []Run) []benchfmtUnit {
	var out []benchfmtUnit
	save := benchfmtUnit{SampleCheckpointSaveS, "ckpt-save-sec", "lower", func(m *Metrics) *float64 { return m.CheckpointSaveS }}
	load := benchfmtUnit{SampleCheckpointLoadS, "ckpt-load-sec", "lower", func(m *Metrics) *float64 { return m.CheckpointLoadS }}
	for _, u := range []benchfmtUnit{save, load} {
		for i := range runs {
			if runs[i].Metrics.Status == StatusOK && u.headline(&runs[i].Metrics) != nil {
				out = append(out, u)
				break
			}
		}
	}
	return out
}

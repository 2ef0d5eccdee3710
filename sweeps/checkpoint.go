package sweeps

import (
	"fmt"
	"strconv"
	"strings"
)

// Checkpoint kinds: the checkpoint axis (issue 17 §2). sharded saves each rank's
// own shard (torch.distributed.checkpoint's layout); full gathers the whole model
// and optimizer state to rank 0 (FSDP's FULL_STATE_DICT with rank0_only).
const (
	CheckpointNone    = "none"
	CheckpointSharded = "sharded"
	CheckpointFull    = "full"
)

// CheckpointValues lists the allowed values of the checkpoint axis.
var CheckpointValues = []string{CheckpointNone, CheckpointSharded, CheckpointFull}

// Checkpoints reports whether the run saves checkpoints. A config stored before
// the axis existed has an empty Checkpoint, which means none.
func (rc RunConfig) Checkpoints() bool {
	return rc.Checkpoint != "" && rc.Checkpoint != CheckpointNone
}

// DefaultCheckpointEvery is checkpoint_every when a checkpointing point does not
// give it: one save at the middle of the measured steps, so a resume check has
// as many steps after the save as before it.
func DefaultCheckpointEvery(steps int) int { return max(1, steps/2) }

// checkCheckpoint fills checkpoint_every and refuses settings under which no
// checkpoint would be saved or no resumed step compared. Without checkpointing
// it clears checkpoint_every so the setting cannot make two equal runs differ.
func checkCheckpoint(rc *RunConfig) *problem {
	if !rc.Checkpoints() {
		if rc.ResumeCheck {
			return &problem{f: fResumeCheck, fix: "set checkpoint: sharded or checkpoint: full, or drop resume_check",
				combo: "{checkpoint: none, resume_check: true}",
				msg: func(src func(field) (value, bool)) string {
					return fmt.Sprintf("resume_check needs a checkpoint to resume from, but checkpoint is none (%s)", origin(src, fCheckpoint))
				}}
		}
		rc.Checkpoint, rc.CheckpointEvery = CheckpointNone, 0
		return nil
	}
	if rc.CheckpointEvery == 0 {
		rc.CheckpointEvery = DefaultCheckpointEvery(rc.Steps)
	}
	every, steps := rc.CheckpointEvery, rc.Steps
	if every > steps {
		return &problem{f: fCheckpointEvery, fix: fmt.Sprintf("give checkpoint_every at most %d", steps),
			msg: func(func(field) (value, bool)) string {
				return fmt.Sprintf("checkpoint_every %d is more than the %d measured steps (steps): no checkpoint would be saved", every, steps)
			}}
	}
	if rc.ResumeCheck && every == steps {
		return &problem{f: fCheckpointEvery, fix: fmt.Sprintf("give checkpoint_every below %d, or more steps", steps),
			msg: func(func(field) (value, bool)) string {
				return fmt.Sprintf("resume_check resumes from the first checkpoint and compares the steps after it, but checkpoint_every %d equals steps %d: no step would follow it", every, steps)
			}}
	}
	return nil
}

// appendCheckpointKey appends the checkpoint settings to a training key's JSON
// (before its closing brace) only when the run checkpoints, so the IDs of runs
// without checkpointing are those they had before the axis existed.
func (rc *RunConfig) appendCheckpointKey(b []byte) []byte {
	if !rc.Checkpoints() {
		return b
	}
	b = append(b, `,"checkpoint":`...)
	b = appendJSONString(b, rc.Checkpoint)
	b = append(b, `,"checkpoint_every":`...)
	b = strconv.AppendInt(b, int64(rc.CheckpointEvery), 10)
	b = append(b, `,"resume_check":`...)
	return strconv.AppendBool(b, rc.ResumeCheck)
}

// appendCheckpointSlug names the checkpoint kind in the slug ("-ck_sharded",
// "-ck_full", "+rc" with resume_check); nothing without checkpointing.
func (rc *RunConfig) appendCheckpointSlug(b []byte) []byte {
	if !rc.Checkpoints() {
		return b
	}
	b = append(b, "-ck_"...)
	b = append(b, rc.Checkpoint...)
	if rc.ResumeCheck {
		b = append(b, "+rc"...)
	}
	return b
}

// CheckCheckpoint checks the checkpoint settings of a config that did not come
// through a spec (a run_args.json, a plugin's input): a known kind, and
// checkpoint_every between 1 and steps (below steps with resume_check).
func (rc RunConfig) CheckCheckpoint() error {
	if !rc.Checkpoints() {
		if rc.ResumeCheck {
			return fmt.Errorf("resume_check needs checkpoint: sharded or full, but checkpoint is none")
		}
		return nil
	}
	if rc.Checkpoint != CheckpointSharded && rc.Checkpoint != CheckpointFull {
		return fmt.Errorf("unknown checkpoint %q (allowed: %s)", rc.Checkpoint, strings.Join(CheckpointValues, ", "))
	}
	hi := rc.Steps
	if rc.ResumeCheck {
		hi--
	}
	if rc.CheckpointEvery < 1 || rc.CheckpointEvery > hi {
		return fmt.Errorf("checkpoint_every %d must be from 1 to %d (steps %d%s)", rc.CheckpointEvery, max(hi, 1), rc.Steps,
			map[bool]string{true: ", less one for resume_check", false: ""}[rc.ResumeCheck])
	}
	return nil
}

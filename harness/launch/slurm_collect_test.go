package launch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// jobsIn lists the jobs Slurm knows (queued, running, or ended within
// MinJobAge) that ran in runDir.
func jobsIn(t *testing.T, runDir string) []string {
	t.Helper()
	out, err := exec.Command("scontrol", "show", "job", "-o").CombinedOutput()
	if err != nil && strings.Contains(string(out), "No jobs") {
		return nil
	}
	require.NoError(t, err, string(out))
	re := regexp.MustCompile(`^JobId=([0-9]+) .* WorkDir=(\S+)`)
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(line); m != nil && m[2] == runDir {
			ids = append(ids, m[1])
		}
	}
	return ids
}

// submitAbandoned submits one repeat of the shell backend's run as a launcher
// would, records its id, and follows it no further: a sweep killed right after
// sbatch. It returns the job id.
func submitAbandoned(t *testing.T, be *shellBackend, rc sweeps.RunConfig, env backends.RunEnv) string {
	t.Helper()
	opts, err := ParseSlurmOptions(rc.LauncherOptions)
	require.NoError(t, err)
	job, err := be.PrepareJob(context.Background(), rc, env, slurmPlacement, false)
	require.NoError(t, err)
	script := filepath.Join(env.RunDir, ScriptFile)
	require.NoError(t, os.WriteFile(script, []byte(opts.Script(rc, "shell", job.Spec(), env.RunDir)), 0o644))
	id, err := submit(script)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(env.RunDir, JobIDFile), []byte(id+"\n"), 0o644))
	return id
}

// waitEnded waits until Slurm says job id has ended.
func waitEnded(t *testing.T, id string) jobInfo {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := queryJob(id)
		if err == nil && info.terminal() {
			return info
		}
		require.True(t, time.Now().Before(deadline), "job %s did not end", id)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSlurmEndedJobIsCollectedNotResubmitted: a job that ended (COMPLETED or
// FAILED) while no launcher followed it is collected by the next one, from
// Slurm's state and its output, and not submitted again; once its result is
// recorded (the same launcher's next repeat, or Recorded from metrics.json) the
// run submits a job of its own.
func TestSlurmEndedJobIsCollectedNotResubmitted(t *testing.T) {
	needSlurm(t)
	tests := []struct {
		name string
		cmd  string
		want results.Status
		line string
	}{
		{"completed", `echo done`, results.StatusOK, "stdout 0 done"},
		{"failed", `echo "it broke" >&2; exit 3`, results.StatusFailed, "stderr 0 it broke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			be := &shellBackend{cmd: tt.cmd}
			rc, env := shellRun(t, time.Minute)
			id := submitAbandoned(t, be, rc, env)
			info := waitEnded(t, id)

			s := NewSlurm()
			res, err := s.Run(context.Background(), be, rc, env, nil)
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.Status, res.Error)
			assert.True(t, be.job.attached, "collected, not prepared anew")
			assert.Contains(t, be.job.seen(), tt.line, "the job's output reached the backend")
			assert.Equal(t, id, res.Extra[ExtraJobID])
			assert.Equal(t, []string{id}, jobsIn(t, env.RunDir), "no job was submitted")
			assert.Equal(t, id, readID(t, env.RunDir))
			assert.Equal(t, info.Start, res.Started, "when the job ran, as Slurm says")
			assert.False(t, res.Started.IsZero())

			// The next repeat of the run, in the same launcher: a job of its own.
			res, err = s.Run(context.Background(), be, rc, env, nil)
			require.NoError(t, err)
			second := readID(t, env.RunDir)
			assert.NotEqual(t, id, second)
			assert.False(t, be.job.attached)
			assert.Equal(t, second, res.Extra[ExtraJobID])

			// A resumed sweep whose metrics.json names that job submits a new one.
			s = NewSlurm()
			s.Recorded(second)
			assert.False(t, s.Pending(rc, env.RunDir))
			_, err = s.Run(context.Background(), be, rc, env, nil)
			require.NoError(t, err)
			assert.NotContains(t, []string{id, second}, readID(t, env.RunDir))
			assert.Len(t, jobsIn(t, env.RunDir), 3)
		})
	}
}

// TestSlurmPendingSaysWhatRunWillDo: Pending is true for a job that runs or
// ended unrecorded, false for a cancelled one, a recorded one, and none.
func TestSlurmPendingSaysWhatRunWillDo(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{cmd: `echo started; sleep 120`}
	rc, env := shellRun(t, 5*time.Minute)
	assert.False(t, NewSlurm().Pending(rc, env.RunDir), "no job yet")
	id := submitAbandoned(t, be, rc, env)
	assert.True(t, NewSlurm().Pending(rc, env.RunDir), "queued or running")
	_, err := slurmCmd("scancel", id)
	require.NoError(t, err)
	info := waitEnded(t, id)
	require.Equal(t, "CANCELLED", info.State)
	assert.False(t, NewSlurm().Pending(rc, env.RunDir), "a cancelled job runs again")

	other := rc
	other.Steps = 99 // another configuration: its fingerprint is not the script's
	be.cmd = "true"
	id = submitAbandoned(t, be, rc, env)
	waitEnded(t, id)
	assert.True(t, NewSlurm().Pending(rc, env.RunDir))
	assert.False(t, NewSlurm().Pending(other, env.RunDir), "a job of another configuration is not collected")
}

func TestParseScontrolTimes(t *testing.T) {
	j, err := parseScontrol("JobId=7 JobName=x JobState=COMPLETED StartTime=2026-11-24T17:30:02 EndTime=Unknown ExitCode=0:0")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 11, 24, 17, 30, 2, 0, time.Local), j.Start)
	assert.True(t, j.End.IsZero())
}

// TestSlurmForgottenJobIsCollectedFromItsOutput: a job Slurm no longer knows
// (ended longer ago than MinJobAge, no accounting) that left output ran: it is
// collected from that output, not submitted again. One that left none never
// started and is submitted.
func TestSlurmForgottenJobIsCollectedFromItsOutput(t *testing.T) {
	needSlurm(t)
	for _, ran := range []bool{true, false} {
		t.Run(map[bool]string{true: "ran", false: "never started"}[ran], func(t *testing.T) {
			t.Parallel()
			be := &shellBackend{cmd: `echo submitted again`}
			rc, env := shellRun(t, time.Minute)
			opts, err := ParseSlurmOptions(rc.LauncherOptions)
			require.NoError(t, err)
			job, err := be.PrepareJob(context.Background(), rc, env, slurmPlacement, false)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(env.RunDir, ScriptFile), []byte(opts.Script(rc, "shell", job.Spec(), env.RunDir)), 0o644))
			const forgotten = "4000000000" // no job of this cluster has this id
			require.NoError(t, os.WriteFile(filepath.Join(env.RunDir, JobIDFile), []byte(forgotten+"\n"), 0o644))
			if ran {
				require.NoError(t, os.WriteFile(filepath.Join(env.RunDir, "slurm-"+forgotten+".out"), []byte("0: done long ago\n"), 0o644))
			}
			var log strings.Builder
			env.Stderr = &log

			res, err := NewSlurm().Run(context.Background(), be, rc, env, nil)
			require.NoError(t, err)
			assert.Equal(t, results.StatusOK, res.Status, res.Error)
			if ran {
				assert.Contains(t, be.job.seen(), "stdout 0 done long ago")
				assert.Empty(t, jobsIn(t, env.RunDir), "nothing was submitted")
				assert.Equal(t, forgotten, res.Extra[ExtraJobID])
				assert.Contains(t, log.String(), "Slurm no longer knows job "+forgotten)
			} else {
				assert.Contains(t, be.job.seen(), "stdout 0 submitted again")
				assert.Len(t, jobsIn(t, env.RunDir), 1)
			}
		})
	}
}

// TestSlurmLostJobIsNotMarkedRecorded: when the controller stops answering and
// Run gives up on a job, the job is not marked as recorded (it may still run):
// the repeat's result carries no job id, so a resumed sweep collects the job
// rather than submitting the run again. Slurm's commands are shims here.
func TestSlurmLostJobIsNotMarkedRecorded(t *testing.T) {
	shims := t.TempDir()
	for name, body := range map[string]string{
		"sbatch":   "echo 4242",
		"scontrol": "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1",
		"squeue":   "exit 0",
		"scancel":  "exit 0",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(shims, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	}
	t.Setenv("PATH", shims+string(os.PathListSeparator)+os.Getenv("PATH"))
	be := &shellBackend{cmd: "true"}
	rc, env := shellRun(t, time.Minute)
	// The fastest poll the option allows: five missed polls (give-up) in 0.4 s.
	rc.LauncherOptions = map[string]any{"poll_interval": "100ms"}
	s := NewSlurm()
	res, err := s.Run(context.Background(), be, rc, env, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Unable to contact slurm controller")
	assert.NotContains(t, res.Extra, ExtraJobID, "no result of job 4242 was read")
	assert.False(t, s.isDone("4242"))
	assert.Equal(t, "4242", readID(t, env.RunDir), "the job stays the run's, for the resume")
}

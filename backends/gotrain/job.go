package gotrain

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

var _ backends.JobBackend = (*Backend)(nil)

// PrepareJob describes a run for a batch launcher: one task per rank, each the
// `fsdpbench worker` that Run starts locally, which finds its place from Slurm's
// variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID) and rank 0
// at MASTER_ADDR:MASTER_PORT, which the job script exports. This executable must
// be where every node can start it (a shared file system), like the run directory.
func (b *Backend) PrepareJob(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, _ backends.Placement, attach bool) (backends.Job, error) {
	exe, err := b.executable()
	if err != nil {
		return nil, fmt.Errorf("gotrain: find this executable for the job's workers: %w", err)
	}
	cfgPath := filepath.Join(env.RunDir, configFile)
	if !attach {
		if cfgPath, err = writeRunConfig(rc, env.RunDir); err != nil {
			return nil, err
		}
	}
	return &job{rc: rc, runDir: env.RunDir, spec: backends.JobSpec{
		TasksPerNode: rc.GPUsPerNode,
		Argv:         []string{exe, "worker"},
		Env:          []string{EnvRunConfig + "=" + cfgPath},
		Dir:          env.RunDir,
	}, tails: map[int][]string{}, exits: map[int]int{}, first: -1, oom: -1, diverged: -1}, nil
}

// job is a gotrain run started by a batch launcher; it reads what the tasks
// print as Run reads its workers' pipes.
type job struct {
	rc     sweeps.RunConfig
	runDir string
	spec   backends.JobSpec

	mu    sync.Mutex
	steps []results.Step
	tails map[int][]string // each rank's last stderr lines
	exits map[int]int      // exit codes srun reported per rank
	first int              // the first rank srun reported failing, -1 before
	oom   int              // the first rank that ran out of device memory, -1 before
	// diverged is the first rank that stopped on a loss that is not finite, -1
	// before; badEvent is the first broken FSDPBENCH line.
	diverged     int
	divergedSaid bool // diverged is the rank whose own line said so
	badEvent     string
}

// srunExit matches srun's report of tasks that failed:
// "srun: error: node1: task 1: Exited with exit code 3" or "tasks 0-1: ...".
var srunExit = regexp.MustCompile(`srun: error: \S+: tasks? ([0-9]+)[^:]*: Exited with exit code ([0-9]+)`)

func (j *job) Spec() backends.JobSpec { return j.spec }

func (j *job) Line(stream string, task int, line string) []backends.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	if stream == "stderr" {
		if m := srunExit.FindStringSubmatch(line); m != nil {
			r, _ := strconv.Atoi(m[1])
			code, _ := strconv.Atoi(m[2])
			j.exits[r] = code
			if j.first < 0 {
				j.first = r
			}
			if code == ExitOOM && j.oom < 0 {
				j.oom = r
			}
			if code == ExitDiverged && j.diverged < 0 {
				j.diverged = r
			}
		}
		if task >= 0 {
			t := append(j.tails[task], line)
			if len(t) > stderrTail {
				t = t[len(t)-stderrTail:]
			}
			j.tails[task] = t
			// The exit code is the signal; the worker's own line says so too,
			// in case srun's report is lost (a line cut by the job's end).
			if strings.Contains(line, "fsdpbench worker:") && strings.Contains(line, errOOMText) && j.oom < 0 {
				j.oom = task
			}
			// The worker that says it diverged is the one to quote (srun reports a
			// range of tasks by its first).
			if strings.Contains(line, "fsdpbench worker:") && strings.Contains(line, errDiverged.Error()+": ") && !j.divergedSaid {
				j.diverged, j.divergedSaid = task, true
			}
		}
		return nil
	}
	we, ok, err := stepEvent(line)
	if err != nil && j.badEvent == "" {
		j.badEvent = fmt.Sprintf("task %d: %v", task, err)
	}
	if !ok {
		return nil
	}
	loss := we.Loss
	j.steps = append(j.steps, results.Step{Step: len(j.steps) + 1, Loss: &loss, StepTimeS: we.StepTimeS, Tokens: we.Tokens})
	return []backends.Event{{Kind: backends.EventStep, Time: time.Now(), Rank: task, Step: len(j.steps),
		Loss: &loss, StepTimeS: we.StepTimeS, Tokens: we.Tokens}}
}

// errOOMText is how the device's out-of-memory error reads in a worker's last line.
var errOOMText = device.ErrOutOfMemory.Error()

func (j *job) Finish(exitErr error, _ func(string)) results.Result {
	j.mu.Lock()
	defer j.mu.Unlock()
	res := newResult(j.rc)
	res.Finished = time.Now()
	switch {
	case j.oom >= 0:
		res.Status = results.StatusOOM
		res.Error = fmt.Sprintf("rank %d ran out of device memory", j.oom)
		if tail := j.tails[j.oom]; len(tail) > 0 {
			res.Error += ":\n" + strings.Join(tail, "\n")
		}
	case j.diverged >= 0:
		res.Status = results.StatusDiverged
		res.Error = divergedError(j.diverged, strings.Join(j.tails[j.diverged], "\n"))
	case exitErr != nil:
		res.Status = results.StatusFailed
		r := j.first
		if r < 0 {
			r = j.anyTail()
		}
		if r >= 0 {
			res.Error = fmt.Sprintf("rank %d exited with code %d (%v)", r, j.exits[r], exitErr)
			if tail := j.tails[r]; len(tail) > 0 {
				res.Error += "; its last stderr lines:\n" + strings.Join(tail, "\n")
			}
		} else {
			res.Error = fmt.Sprintf("the job failed: %v (see stderr.log)", exitErr)
		}
	case j.badEvent != "":
		res.Status, res.Error = results.StatusFailed, "gotrain: a worker printed a broken FSDPBENCH line: "+j.badEvent
	default:
		if err := (&Backend{}).collect(&res, j.rc, j.runDir, j.steps); err != nil {
			res.Status, res.Error = results.StatusFailed, err.Error()
			break
		}
		hosts := map[string]bool{}
		for _, pr := range res.PerRank {
			if pr.Host != "" {
				hosts[pr.Host] = true
			}
		}
		for h := range hosts {
			res.Env.Hosts = append(res.Env.Hosts, h)
		}
		sort.Strings(res.Env.Hosts)
	}
	return res
}

// anyTail is the lowest rank that printed on stderr, or -1.
func (j *job) anyTail() int {
	r := -1
	for k := range j.tails {
		if r < 0 || k < r {
			r = k
		}
	}
	return r
}

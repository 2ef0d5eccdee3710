package torchrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

var _ backends.JobBackend = (*Backend)(nil)

// PrepareJob describes a run for a batch launcher: one task per node, each
// running torchrun (or accelerate launch) for that node's ranks. Several nodes
// meet at the first node's host on backend_options.rdzv_port (c10d), as a
// hand-written Slurm script does; one node meets on the job's own MASTER_PORT (see LocalNode).
func (b *Backend) PrepareJob(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, place backends.Placement, attach bool) (backends.Job, error) {
	runDir, err := filepath.Abs(env.RunDir)
	if err != nil {
		return nil, err
	}
	var j *Job
	if attach {
		j, err = b.attach(ctx, rc, runDir)
	} else {
		j, err = b.Prepare(ctx, rc, runDir)
	}
	if err != nil {
		return nil, err
	}
	// One node meets on the job's own MASTER_PORT (see LocalNode for why not
	// --standalone); several meet at the first node's host on rdzv_port.
	node := &Node{Nodes: 1, Rank: "0", Endpoint: "localhost:$MASTER_PORT", ID: "$SLURM_JOB_ID"}
	if place.Nodes > 1 {
		node = &Node{Nodes: place.Nodes, Rank: place.NodeRank,
			Endpoint: place.MasterAddr + ":" + strconv.Itoa(j.o.RdzvPort), ID: place.JobID}
	}
	argv, err := j.Argv(node)
	if err != nil {
		return nil, err
	}
	if !attach {
		if err := writeCommand(filepath.Join(runDir, "command.json"), argv); err != nil {
			return nil, err
		}
	}
	gpus := rc.GPUsPerNode
	if rc.Hardware == "cpu" {
		gpus = 0
	}
	return &slurmJob{job: j, rep: j.NewReport(), spec: backends.JobSpec{
		TasksPerNode: 1, GPUsPerNode: gpus, Argv: argv, Env: j.Env(nil), Dir: j.Dir,
	}}, nil
}

// attach rebuilds the Job of a repeat whose processes are already running from
// runDir, without Prepare's clearing of its reports and output directory.
func (b *Backend) attach(ctx context.Context, rc sweeps.RunConfig, runDir string) (*Job, error) {
	o, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return nil, err
	}
	j := &Job{rc: rc, o: o, Paths: contract.Paths{RunDir: runDir, MetricsDir: filepath.Join(runDir, "ranks"),
		OutputDir: filepath.Join(runDir, "output"), ModelJSON: filepath.Join(runDir, "model.json")}}
	j.script = filepath.Join(runDir, "fsdpbench_train.py")
	if o.Script != "" {
		if j.script, err = filepath.Abs(o.Script); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(j.script); err != nil {
		return nil, fmt.Errorf("torchrun: re-attaching to the running job of %s: %w", runDir, err)
	}
	info, err := b.torch(ctx, o.Python)
	if err != nil {
		return nil, err
	}
	j.torch = info.Version
	j.vars = runVars(rc, j.Paths, j.script)
	if j.Dir, err = workDir(o, j.vars, j.Paths); err != nil {
		return nil, err
	}
	if o.Launcher == LauncherAccelerate {
		j.accelCfg = filepath.Join(runDir, "accelerate_config.yaml")
	}
	return j, nil
}

// slurmJob is a torchrun Job started by a batch launcher.
type slurmJob struct {
	job  *Job
	rep  *Report
	spec backends.JobSpec
}

func (s *slurmJob) Spec() backends.JobSpec { return s.spec }

func (s *slurmJob) Line(stream string, _ int, line string) []backends.Event {
	if stream == "stderr" {
		s.rep.Stderr(line)
		return nil
	}
	var evs []backends.Event
	for _, st := range s.rep.Stdout(line) {
		evs = append(evs, stepEvent(st, s.job.rc))
	}
	return evs
}

func (s *slurmJob) Finish(exitErr error, warn func(string)) results.Result {
	rc := s.job.rc
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), Finished: time.Now()}
	s.job.Finish(&res, s.rep, exitErr, warn)
	return res
}

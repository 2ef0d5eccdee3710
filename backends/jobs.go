package backends

import (
	"context"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// JobBackend is a Backend whose runs are processes that a batch launcher (Slurm)
// can start on its own nodes: instead of Run, the launcher asks for the run's
// per-node command, starts it in a job, and hands the job's output and exit back
// for the Result. The harness uses it for runs with launcher: slurm; a backend
// without it cannot run under Slurm.
type JobBackend interface {
	Backend
	// PrepareJob readies one repeat of rc in env.RunDir (absolute) and describes
	// its processes. With attach set, a job started earlier from the same
	// directory is still queued or running (the harness was restarted and
	// re-attaches to it): nothing of it may be cleared or rewritten, only read.
	PrepareJob(ctx context.Context, rc sweeps.RunConfig, env RunEnv, place Placement, attach bool) (Job, error)
}

// Placement says where a job's tasks run. A batch launcher learns the hosts only
// once the job starts, so the fields that vary are shell expressions that the job
// script expands on each node.
type Placement struct {
	// Nodes is how many nodes the job spans.
	Nodes int
	// MasterAddr is the first node's host name, where rank 0 and the rendezvous
	// live ("$MASTER_ADDR").
	MasterAddr string
	// NodeRank is the index of the node a task runs on ("$SLURM_NODEID").
	NodeRank string
	// JobID names the job, the same on every node ("$SLURM_JOB_ID").
	JobID string
}

// JobSpec is one repeat of a run as the processes a launcher starts: TasksPerNode
// copies of Argv on each of Placement.Nodes nodes.
type JobSpec struct {
	// TasksPerNode is how many tasks start on each node: one per rank when every
	// rank is its own process (gotrain), one when a per-node launcher starts the
	// ranks (torchrun).
	TasksPerNode int
	// GPUsPerNode is how many GPUs the job asks for on each node; 0 runs on CPUs.
	GPUsPerNode int
	// Argv is each task's command line. An argument may contain Placement's
	// expressions, which the launcher leaves for the shell on each node.
	Argv []string
	// Env is added to the tasks' environment, as KEY=VALUE.
	Env []string
	// Dir is the tasks' working directory.
	Dir string
}

// Job is one repeat of a run prepared for a launcher that starts its processes.
type Job interface {
	// Spec is what to start.
	Spec() JobSpec
	// Line takes one line a task printed, as it comes: stream is "stdout" or
	// "stderr", task the task's index in the job (-1 for the launcher's own
	// lines). It returns the steps the line reports, if any, for progress (a
	// line can hold several: ranks that share a pipe can write into each
	// other's lines).
	Line(stream string, task int, line string) []Event
	// Finish builds the repeat's Result once every task has ended; exitErr is nil
	// when the job succeeded and says how it ended otherwise. A job the launcher
	// stopped (time limit, cancellation, node failure) is the launcher's to
	// classify: Finish is called for jobs that ended on their own. warn receives
	// notes for the run's stderr.log.
	Finish(exitErr error, warn func(string)) results.Result
}

// Package backends defines the contract every execution engine implements (the
// analytic model, the Go trainer, torchrun, external plugins) and the registry the
// CLI and harness look them up in. Inputs and outputs are plain JSON-able data so the
// same interface is served in-process and over hashicorp/go-plugin.
package backends

import (
	"context"
	"io"
	"time"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Backend executes runs. Implementations must stop every process of a run within
// seconds when ctx is cancelled.
type Backend interface {
	Name() string
	// Describe says what the backend supports and whether it can run here (and why not).
	Describe(ctx context.Context) (Description, error)
	// Validate refuses configurations the backend cannot run; the error is the reason,
	// and the run is recorded as infeasible with it.
	Validate(ctx context.Context, rc sweeps.RunConfig) error
	// Run executes one repeat of rc. A run that ends badly (OOM, crash, timeout) is
	// reported through Result.Status with a nil error; the error return is for
	// failures of the backend itself (it could not start, bad options).
	Run(ctx context.Context, rc sweeps.RunConfig, env RunEnv, emit func(Event)) (results.Result, error)
}

// Description is what `fsdpbench backends` prints for one backend.
type Description struct {
	Name      string `json:"name"`
	Summary   string `json:"summary"`
	NeedsGPU  bool   `json:"needs_gpu"`
	Available bool   `json:"available"`
	// Reason says why the backend is not available here, and what to install or set.
	Reason string `json:"reason,omitempty"`
	// Axes lists, per axis, the values the backend supports; an absent axis means all.
	Axes map[string][]string `json:"axes,omitempty"`
	// Source is "builtin" or the path of a plugin binary.
	Source string `json:"source,omitempty"`
}

// RunEnv is where and how one repeat of a run executes.
type RunEnv struct {
	// RunDir is the run's directory (results layout); backends write ranks/ and
	// logs there.
	RunDir string `json:"run_dir"`
	// Repeat is the 0-based index of this execution among the run's repeats.
	Repeat int `json:"repeat"`
	// Launcher is "local" or "slurm".
	Launcher string `json:"launcher"`
	// Devices are the device indices assigned to the run on this host, if any.
	Devices []int `json:"devices,omitempty"`
	// Stdout and Stderr receive the run's process output (the harness points them at
	// stdout.log and stderr.log). Over a plugin they travel as log events.
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`
}

// EventKind says what an Event reports.
type EventKind string

// Event kinds.
const (
	EventStarted  EventKind = "started"
	EventQueued   EventKind = "queued"
	EventStep     EventKind = "step"
	EventLog      EventKind = "log"
	EventFinished EventKind = "finished"
)

// Event is progress reported while a run executes.
type Event struct {
	Kind EventKind `json:"kind"`
	Time time.Time `json:"time"`
	Rank int       `json:"rank"`
	// Step events.
	Step      int      `json:"step,omitempty"`
	Loss      *float64 `json:"loss,omitempty"`
	StepTimeS float64  `json:"step_time_s,omitempty"`
	Tokens    int64    `json:"tokens,omitempty"`
	// Log events: Stream is "stdout" or "stderr".
	Stream string `json:"stream,omitempty"`
	Line   string `json:"line,omitempty"`
	// Finished events.
	Status results.Status `json:"status,omitempty"`
	// Queued events: why the scheduler has not started the run yet (Slurm's
	// pending reason, e.g. Resources, ReqNodeNotAvail).
	Reason string `json:"reason,omitempty"`
}

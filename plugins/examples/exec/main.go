// Command fsdpbench-backend-exec is an example external backend: it runs any
// command once per run and reads fsdpbench's metrics contract, so a DeepSpeed or
// Megatron launcher (or any script) becomes a backend without forking fsdpbench.
//
// Build it onto the plugin path, pin it, and name it in a spec:
//
//	go build -o ~/.fsdpbench/plugins/fsdpbench-backend-exec ./plugins/examples/exec
//	fsdpbench plugins lock
//
//	backend: exec
//	backend_options:
//	  command: ["python3", "train.py", "--bs", "{batch_per_device}", "--ws", "{world_size}"]
//
// command is an argv (no shell) and a template as the torchrun backend's args
// (backends/contract): {axis} is the run's value of an axis (world_size,
// batch_per_device, sharding, seq_len, steps, ...), {bool?text} a conditional flag,
// {run_dir} and {metrics_dir} those directories. The command gets
// FSDPBENCH_METRICS_DIR, FSDPBENCH_RUN_DIR and FSDPBENCH_RUN_ID in its environment (and
// CUDA_VISIBLE_DEVICES when fsdpbench assigned devices) and must:
//   - write ranks/rank-<r>.json for every rank r < world_size into $FSDPBENCH_METRICS_DIR:
//     {"rank", "world_size", "device", "tokens", "measured_wall_s", "steps": [{"step",
//     "loss", "step_time_s"}], "peak_mem_allocated_bytes", "peak_mem_reserved_bytes",
//     "peak_rss_bytes"} (the torchrun backend's format);
//   - or print, from rank 0 only, one `FSDPBENCH {"step": 1, "loss": 2.3, "step_time_s": 0.1}`
//     line on stdout per measured step: without rank files they are the figures, as
//     under the torchrun backend (the wall time is the sum of the step times, and
//     every rank is taken to have done rank 0's share; no memory figures). With
//     rank files they are only live progress;
//   - exit 0 when it ran, 3 when the configuration cannot run (infeasible, reason on
//     stderr's last line), 4 when it ran out of memory.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/plugins/sdk"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func main() { sdk.Serve(backend{}) }

// killGrace is how long the command has between SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

type backend struct{}

func (backend) Name() string { return "exec" }

func (backend) Describe(context.Context) (backends.Description, error) {
	return backends.Description{
		Name:      "exec",
		Summary:   "runs backend_options.command once per run and reads the metrics contract (rank files, FSDPBENCH step lines)",
		Available: true,
	}, nil
}

// Validate refuses a command that cannot be built: a mistake in the spec.
func (backend) Validate(_ context.Context, rc sweeps.RunConfig) error {
	_, err := argv(rc, "", "")
	return backends.SpecErr(err)
}

// argv expands backend_options.command for rc (contract.Expand: {axis},
// {bool?text}, {run_dir}, {metrics_dir}, ...).
func argv(rc sweeps.RunConfig, runDir, metricsDir string) ([]string, error) {
	for k := range rc.BackendOptions {
		if k != "command" {
			return nil, fmt.Errorf("exec: unknown backend_options key %q (known: command)", k)
		}
	}
	list, ok := rc.BackendOptions["command"].([]any)
	if !ok || len(list) == 0 {
		return nil, errors.New(`exec: backend_options.command must be a non-empty list of strings, e.g. ["python3", "train.py", "--bs", "{batch_per_device}"]`)
	}
	tmpl := make([]string, len(list))
	for i, a := range list {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("exec: backend_options.command[%d] must be a string, got %T", i, a)
		}
		tmpl[i] = s
	}
	vars := contract.Vars(rc, contract.Paths{RunDir: runDir, MetricsDir: metricsDir, OutputDir: runDir})
	return contract.Expand("exec: backend_options.command", tmpl, vars)
}

func (backend) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), Started: time.Now()}
	runDir, err := filepath.Abs(env.RunDir) // the command runs in it
	if err != nil {
		return res, fmt.Errorf("exec: %w", err)
	}
	metricsDir := filepath.Join(runDir, results.RanksDir)
	if err := os.MkdirAll(metricsDir, 0o755); err != nil {
		return res, fmt.Errorf("exec: %w", err)
	}
	args, err := argv(rc, runDir, metricsDir)
	if err != nil {
		return res, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = runDir
	// RunGroup ends whatever the command starts, daemons included, when it exits,
	// when ctx ends, and should this plugin die first.
	cmd.Env = append(contract.WithEnv(os.Environ(), rc.Env), contract.EnvMetricsDir+"="+metricsDir, contract.EnvRunDir+"="+runDir,
		contract.EnvRunID+"="+rc.ID)
	if len(env.Devices) > 0 {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+contract.VisibleDevices(env.Devices, os.Getenv("CUDA_VISIBLE_DEVICES")))
	}
	var (
		lastLine  string         // stderr's, the command's reason when it fails
		stepLines []results.Step // rank 0's, the figures when no rank file is written
		badStep   error          // the first broken step line
		diverged  string         // where a step line's loss was first NaN or infinite
	)
	// Every record of a line is read (ranks printing at once share one), and a
	// step its rank already reported, or a rank outside the world, is a broken
	// line rather than one more good step.
	records := contract.NewStepLines(rc.WorldSize)
	started, waitErr := contract.RunGroup(ctx, cmd, killGrace, contract.Lines{
		Stdout: func(line string) {
			sts, errs := records.Parse(line)
			if len(errs) > 0 && badStep == nil {
				badStep = errs[0]
			}
			for _, st := range sts {
				if st.Rank == 0 {
					stepLines = append(stepLines, st.Step)
					if st.Diverged != "" && diverged == "" {
						diverged = st.Diverged
					}
				}
				emit(backends.Event{Kind: backends.EventStep, Time: time.Now(), Rank: st.Rank, Step: st.Step.Step,
					Loss: st.Loss, StepTimeS: st.StepTimeS, Tokens: rc.TokensPerStep()})
			}
		},
		Stderr: func(line string) {
			if t := strings.TrimSpace(line); t != "" {
				lastLine = t
			}
		},
		StdoutSink: env.Stdout,
		StderrSink: env.Stderr,
		Started:    func() { emit(backends.Event{Kind: backends.EventStarted, Time: time.Now()}) },
	})
	if !started {
		return res, fmt.Errorf("exec: starting %s: %w", args[0], waitErr)
	}
	res.Finished = time.Now()

	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.Status, res.Error = results.StatusCanceled, ctx.Err().Error()
	case errors.As(waitErr, &ee) && ee.ExitCode() == contract.ExitInfeasible:
		res.Status, res.Error = results.StatusInfeasible, reason(lastLine, args[0], contract.ExitInfeasible)
	case errors.As(waitErr, &ee) && ee.ExitCode() == contract.ExitOOM:
		res.Status, res.Error = results.StatusOOM, reason(lastLine, args[0], contract.ExitOOM)
	case waitErr != nil:
		res.Status, res.Error = results.StatusFailed, fmt.Sprintf("exec: %s %v: %s (see stderr.log)", args[0], waitErr, lastLine)
	default:
		if err := collect(&res, rc, metricsDir, stepLines, badStep); err != nil {
			res.Status, res.Error = results.StatusFailed, err.Error()
		} else if res.Status == "" && len(res.PerRank) == 0 && diverged != "" {
			res.Status, res.Error = results.StatusDiverged, "diverged: "+diverged // from the step lines alone
		} else if res.Status == "" {
			res.Status = results.StatusOK // or diverged, as the rank files said
		}
	}
	emit(backends.Event{Kind: backends.EventFinished, Time: time.Now(), Status: res.Status})
	return res, nil
}

// reason is the command's own last stderr line, or what its exit code says when it
// gave none: a final status (infeasible, oom) must say why.
func reason(lastLine, command string, code int) string {
	if lastLine != "" {
		return lastLine
	}
	return fmt.Sprintf("exec: %s exited with code %d and printed no reason on stderr", command, code)
}

// collect reads every rank's report into res (the metrics contract), or, when
// the command wrote none, rank 0's step lines; the model axis names what the
// command trained, so its FLOPs come from the shape.
func collect(res *results.Result, rc sweeps.RunConfig, dir string, steps []results.Step, badStep error) error {
	ranks, err := contract.HasRankFiles(dir)
	switch {
	case err != nil:
		return err
	case ranks:
		if err := contract.ReadRanks(res, rc, dir, "exec"); err != nil {
			return err
		}
	case badStep != nil:
		return fmt.Errorf("exec: the command wrote no rank files and printed a broken FSDPBENCH line: %w", badStep)
	case len(steps) == 0:
		return fmt.Errorf("exec: the command exited cleanly but reported nothing: no %s/rank-<r>.json and no FSDPBENCH step lines on stdout", dir)
	case len(steps) > rc.Steps:
		return fmt.Errorf("exec: the command printed %d FSDPBENCH step lines from rank 0 but the run measures %d steps: print one line per measured step (warm-up steps are not reported)",
			len(steps), rc.Steps)
	default:
		res.Steps = steps
		for i := range res.Steps {
			res.Steps[i].Tokens = rc.TokensPerStep()
			res.MeasuredWallS += res.Steps[i].StepTimeS
		}
	}
	if shape, err := shapes.Lookup(rc.Model); err == nil {
		res.ModelFlopsPerToken = shape.FlopsPerToken(rc.SeqLen)
	}
	return nil
}

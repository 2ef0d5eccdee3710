package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// Exit codes (DESIGN.md).
const (
	ExitOK     = 0
	ExitFailed = 1 // some run failed or timed out; oom and infeasible are results
	ExitUsage  = 2 // bad command line or spec
	// ExitInconclusive: gate found no regression but some checks could not tell
	// (too noisy, or measured under different machine states); measure again.
	ExitInconclusive = 3
	ExitInterrupted  = 130
)

// exitError carries the exit code a command's error maps to. A nil err means the
// command has already said what went wrong.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }
func failure(err error) error    { return &exitError{code: ExitFailed, err: err} }

// specFailure is a usage error when err is a mistake in the spec that a backend or
// launcher found (backends.SpecError: exit 2, nothing ran), a failure otherwise.
func specFailure(err error) error {
	if backends.IsSpecError(err) {
		return usageError(err)
	}
	return failure(err)
}

// run executes the command line args and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// cobra's own errors: unknown commands and flags, wrong argument counts.
		fmt.Fprintf(stderr, "fsdpbench: %v\nRun 'fsdpbench --help' for usage.\n", err)
		return ExitUsage
	}
	if ee.err != nil {
		var se *sweeps.SpecError
		// Errors quote what runs, scripts and files said: escaped, so that no
		// control sequence in them reaches the terminal.
		msg := termsafe.Text(ee.err.Error())
		if errors.As(ee.err, &se) {
			// file:line:col: msg, as compilers print, so editors can jump to it.
			fmt.Fprintln(stderr, msg)
		} else {
			fmt.Fprintln(stderr, "fsdpbench:", msg)
		}
	}
	return ee.code
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "fsdpbench",
		Short: "Benchmark distributed training: FSDP sharding strategies and DDP",
		Long: `fsdpbench expands a sweep spec (YAML) into runs, executes them through a backend
(the analytic model sim, and more), and reports normalized results: tokens/s per rank,
MFU, peak memory, scaling efficiency.

Exit codes: 0 ok; 1 some run failed or timed out (oom and infeasible are results);
2 usage or spec error, or refused before anything ran (another process holds the
results directory, or it cannot be written); 130 interrupted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return refuseEmptyPaths(cmd)
		},
	}
	root.AddCommand(newSweepCmd(), newABCmd(), newPlanCmd(), newReportCmd(), newExportCmd(), newGateCmd(), newCompareCmd(), newPlotCmd(), newBackendsCmd(), newVersionCmd(), newWorkerCmd(), newPluginsCmd(), newIngestCmd(),
		newCalibrateCmd(), newRecommendCmd())
	return root
}

// loadPlan reads a spec with the --set overrides, checking models, hardware
// profiles and backends against what this binary knows.
func loadPlan(path string, sets []string, reg *backends.Registry) (*sweeps.Plan, error) {
	return loadPlanWith(path, sets, reg, false)
}

// loadPlanWith is loadPlan, streamed when stream is set (sweeps.Options.Stream:
// read the runs with plan.All).
func loadPlanWith(path string, sets []string, reg *backends.Registry, stream bool) (*sweeps.Plan, error) {
	plan, err := sweeps.Load(path, sweeps.Options{
		Stream:        stream,
		Set:           sets,
		CheckModel:    shapes.Check,
		CheckHardware: hardware.Check,
		CheckBackend: func(name string) error {
			_, err := reg.Get(name)
			return err
		},
		GPUsPerNode:    gpusPerNode,
		PathOptions:    specPathOptions,
		ProgramOptions: specProgramOptions,
	})
	if err != nil {
		return nil, usageError(err)
	}
	return plan, nil
}

// specPathOptions are the backend and launcher options that name files: in a
// spec they are relative to the spec file's folder, as model: is.
// specProgramOptions name a program (a path when they hold a slash, else looked
// up on PATH), or a command whose first element does.
var (
	specPathOptions    = []string{"backend_options.script", "backend_options.nccl_tests", "backend_options.calibration"}
	specProgramOptions = []string{"backend_options.python", "backend_options.command"}
)

// gpusPerNode is how many GPUs one node of a hardware profile holds (0 for cpu,
// auto and unknown names): world_size alone is split into nodes of that size.
func gpusPerNode(hw string) int {
	p, err := hardware.Lookup(hw)
	if err != nil {
		return 0
	}
	return p.GPUsPerNode
}

// ncclTestsFlag registers --nccl-tests, repeatable.
func ncclTestsFlag(cmd *cobra.Command, files *[]string) {
	cmd.Flags().StringArrayVar(files, "nccl-tests", nil, "nccl-tests output (all_gather_perf, reduce_scatter_perf, all_reduce_perf) whose busbw curves the sim's predictions use: backend_options.nccl_tests for every run (repeatable; sim specs)")
}

// loadPlanWithNCCLTests is loadPlan with --nccl-tests applied as
// --set backend_options.nccl_tests=[FILE,...], so the runs' IDs say which
// measurements predicted them. Only the sim reads nccl-tests output.
func loadPlanWithNCCLTests(path string, sets, files []string, reg *backends.Registry) (*sweeps.Plan, error) {
	return loadNCCLTestsPlan(path, sets, files, reg, false)
}

// loadPlanStream is loadPlanWithNCCLTests, streamed (sweeps.Options.Stream):
// plan walks a million-point grid holding none of its runs.
func loadPlanStream(path string, sets, files []string, reg *backends.Registry) (*sweeps.Plan, error) {
	return loadNCCLTestsPlan(path, sets, files, reg, true)
}

func loadNCCLTestsPlan(path string, sets, files []string, reg *backends.Registry, stream bool) (*sweeps.Plan, error) {
	if len(files) > 0 {
		for _, f := range files {
			if strings.ContainsAny(f, ",[]") || strings.TrimSpace(f) == "" {
				return nil, usageError(fmt.Errorf("--nccl-tests %q: a path with a comma or bracket cannot be passed on; rename the file or list it in backend_options.nccl_tests", f))
			}
			// Read here, so that a bad file is blamed on the flag that named it,
			// not on the --set it becomes below ("--set #3 column 1").
			if _, err := sim.ReadNCCLTests(f); err != nil {
				return nil, usageError(fmt.Errorf("--nccl-tests: %w", err))
			}
		}
		sets = append(slices.Clone(sets), "backend_options.nccl_tests=["+strings.Join(files, ",")+"]")
	}
	plan, err := loadPlanWith(path, sets, reg, stream)
	if err != nil {
		return nil, err
	}
	if len(files) > 0 && plan.Backend != sim.Name {
		return nil, usageError(fmt.Errorf("--nccl-tests feeds the sim backend's predictions; spec %s runs backend %s: use a sim spec (--set backend=sim)", path, plan.Backend))
	}
	return plan, nil
}

// isSimSpec reports whether the spec (with the --set overrides) runs the sim
// backend; a spec that does not load is left to loadPlan to report.
func isSimSpec(path string, sets []string, reg *backends.Registry) bool {
	plan, err := loadPlanWith(path, sets, reg, true)
	return err != nil || plan.Backend == sim.Name
}

// setFlag registers --set, repeatable; a value keeps its commas (--set world_size=1,2).
func setFlag(cmd *cobra.Command, sets *[]string) {
	cmd.Flags().StringArrayVar(sets, "set", nil, "override the spec, Hydra style: key=value or key=v1,v2 for a grid axis (repeatable)")
}

// pathFlags are the flags that name a file or directory to write. Given empty
// (--results "$UNSET", an unset shell variable), they were silently the default.
var pathFlags = []string{"results", "out", "output"}

// refuseEmptyPaths refuses a path flag given with an empty value.
func refuseEmptyPaths(cmd *cobra.Command) error {
	for _, name := range pathFlags {
		f := cmd.Flags().Lookup(name)
		if f != nil && f.Changed && strings.TrimSpace(f.Value.String()) == "" {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (or leave the flag out for %s)", f.DefValue)
			}
			return usageError(fmt.Errorf("--%s is empty: give a path%s; an empty shell variable is the usual cause", name, def))
		}
	}
	return nil
}

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends/gotrain"
)

// newWorkerCmd is `fsdpbench worker`: one rank of a gotrain run, started by the
// gotrain backend with torchrun's variables and FSDPBENCH_RUN_CONFIG. Its exit code
// tells the backend how the rank ended (gotrain.ExitOOM for out of memory).
func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "Run one rank of a gotrain run (internal: the gotrain backend starts it)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := gotrain.Worker(cmd.Context(), gotrain.WorkerEnv{
				Getenv: os.Getenv, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
			})
			if err == nil {
				return nil
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "fsdpbench worker:", err)
			return &exitError{code: gotrain.ExitCode(err)}
		},
	}
}

package main

import (
	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/results"
)

func newBackendsCmd() *cobra.Command {
	var table tableFlags
	cmd := &cobra.Command{
		Use:   "backends",
		Short: "List the backends, whether they can run on this host, and why not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, err := newRegistry()
			if err != nil {
				return failure(err)
			}
			var rows [][]string
			for _, name := range reg.Names() {
				b, err := reg.Get(name)
				if err != nil {
					return failure(err)
				}
				d, err := b.Describe(cmd.Context())
				if err != nil {
					rows = append(rows, []string{name, "no", "?", "", "describe failed: " + err.Error(), ""})
					continue
				}
				rows = append(rows, []string{name, yesNo(d.Available), yesNo(d.NeedsGPU), d.Summary, d.Reason, d.Source})
			}
			width, err := table.resolve(cmd.OutOrStdout())
			if err != nil {
				return err
			}
			// Cut to the terminal: where a plugin came from goes first, then the
			// long summaries and reasons are cut.
			fit := results.TableFit{Width: width, Short: map[string]string{"available": "avail", "needs GPU": "GPU"},
				Drop: []string{"source"}}
			if err := writeTableFit(cmd.OutOrStdout(), []string{"name", "available", "needs GPU", "summary", "reason", "source"}, rows, fit); err != nil {
				return failure(err)
			}
			return nil
		},
	}
	table.add(cmd)
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

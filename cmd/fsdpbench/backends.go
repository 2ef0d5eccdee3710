package main

import (
	"github.com/spf13/cobra"
)

func newBackendsCmd() *cobra.Command {
	return &cobra.Command{
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
			if err := writeTable(cmd.OutOrStdout(), []string{"name", "available", "needs GPU", "summary", "reason", "source"}, rows); err != nil {
				return failure(err)
			}
			return nil
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

package main

import (
	"fmt"
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// writeTable draws header and rows as a text table.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	// Headers are axis and metric names; auto-formatting would mangle "GiB" and "tokens/s".
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header(header)
	if err := t.Bulk(rows); err != nil {
		return err
	}
	return t.Render()
}

// axisValues formats rc's value of each axis (canonical names, as plan.Axes lists
// them), read through the results column registry so every table agrees.
func axisValues(rc sweeps.RunConfig, axes []string) []string {
	run := &results.Run{Config: rc}
	out := make([]string, len(axes))
	for i, a := range axes {
		c, err := results.LookupColumn(a, results.KindAxis)
		if err != nil {
			out[i] = "?"
			continue
		}
		if v := c.Value(run); v != nil {
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

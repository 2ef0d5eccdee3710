package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

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

// notAxes are RunConfig fields that say how a run is named or launched, not what it
// trains; they never make a column of their own.
var notAxes = map[string]bool{
	"id": true, "slug": true, "sweep": true, "backend": true, "launcher": true, "timeout": true,
	"backend_options": true, "launcher_options": true, "search": true, "search_group": true,
}

// varyingAxes lists, in RunConfig order, the axes (JSON names) whose value is not the
// same in every run: the columns that tell a sweep's runs apart.
func varyingAxes(runs []sweeps.RunConfig) []string {
	if len(runs) == 0 {
		return nil
	}
	var axes []string
	t := reflect.TypeFor[sweeps.RunConfig]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || notAxes[name] {
			continue
		}
		first := axisString(runs[0], i)
		for _, rc := range runs[1:] {
			if axisString(rc, i) != first {
				axes = append(axes, name)
				break
			}
		}
	}
	return axes
}

// axisValues formats rc's value of each axis.
func axisValues(rc sweeps.RunConfig, axes []string) []string {
	t := reflect.TypeFor[sweeps.RunConfig]()
	out := make([]string, 0, len(axes))
	for _, a := range axes {
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name == a {
				out = append(out, axisString(rc, i))
				break
			}
		}
	}
	return out
}

func axisString(rc sweeps.RunConfig, field int) string {
	return fmt.Sprint(reflect.ValueOf(rc).Field(field).Interface())
}

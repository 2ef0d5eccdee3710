package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// writeTable draws header and rows as a text table, with the renderer of the
// run tables (results.WriteTable).
func writeTable(w io.Writer, header []string, rows [][]string) error {
	return results.WriteTable(w, header, rows)
}

// writeTableFit is writeTable cut to fit.Width (results.WriteTableFitted).
func writeTableFit(w io.Writer, header []string, rows [][]string, fit results.TableFit) error {
	return results.WriteTableFitted(w, header, rows, fit)
}

// printWrapped prints a line of text under a table, wrapped to width (0: as it is).
func printWrapped(w io.Writer, s string, width int) {
	for _, line := range results.WrapText(s, width) {
		fmt.Fprintln(w, line)
	}
}

// byteUnit is the unit a table column of byte figures is shown in: the one that
// suits the largest (results.ByteUnitFor), GiB when there is none.
func byteUnit(bytes []float64) results.ByteUnit {
	top := -1.0
	for _, b := range bytes {
		top = max(top, b)
	}
	if top < 0 {
		return results.GiB
	}
	return results.ByteUnitFor(top)
}

// byteCells formats a table column of byte figures in the unit that suits them
// (byteUnit), "-" for the unknown ones (nil), and returns the unit's name for
// the heading.
func byteCells(bytes []*int64) ([]string, string) {
	var known []float64
	for _, b := range bytes {
		if b != nil {
			known = append(known, float64(*b))
		}
	}
	u := byteUnit(known)
	cells := make([]string, len(bytes))
	for i, b := range bytes {
		cells[i] = "-"
		if b != nil {
			cells[i] = u.Format(float64(*b))
		}
	}
	return cells, u.Name
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

// tableFlags are --wide and --width, shared by the commands that print the
// one-row-per-run table (sweep, report), so that every such table is fitted alike.
type tableFlags struct {
	wide  bool
	width int
}

func (f *tableFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.wide, "wide", false, "print the whole table (run IDs, every varying axis, full headings) whatever the terminal's width")
	cmd.Flags().IntVar(&f.width, "width", 0, fmt.Sprintf("fit the table to this many columns (%d to %d; default: $COLUMNS, else the terminal's width; piped output is the whole table)", results.MinWidth, results.MaxWidth))
}

// resolve is the width the run table is fitted to (results.ReportOptions.Width):
// 0, the whole table, under --wide; else --width; else $COLUMNS; else the width
// of the terminal out is, if it is one; else 0, so that a table piped to a file
// or a program is whole. A terminal narrower than results.MinWidth gets a table
// of MinWidth.
func (f *tableFlags) resolve(out io.Writer) (int, error) {
	switch {
	case f.wide && f.width != 0:
		return 0, usageError(errors.New("--wide and --width: give one (--wide prints the whole table, --width fits it)"))
	case f.wide:
		return 0, nil
	case f.width != 0:
		if f.width < results.MinWidth || f.width > results.MaxWidth {
			return 0, usageError(fmt.Errorf("--width %d: give %d to %d columns, or --wide for the whole table", f.width, results.MinWidth, results.MaxWidth))
		}
		return f.width, nil
	}
	if s := os.Getenv("COLUMNS"); s != "" {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return 0, usageError(fmt.Errorf("COLUMNS=%q is not a positive number of columns; unset it, or give --width or --wide", s))
		}
		return min(max(n, results.MinWidth), results.MaxWidth), nil
	}
	if file, ok := out.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
		if n, _, err := term.GetSize(int(file.Fd())); err == nil && n > 0 {
			return min(max(n, results.MinWidth), results.MaxWidth), nil
		}
	}
	return 0, nil
}

// axisCells is axisValues for many runs: the columns looked up once, and each
// distinct value formatted once (a plan's summary formats a million runs'
// axes, of a few values each).
type axisCells struct {
	cols []*results.Column // nil: no such column ("?")
	seen []map[any]string
	out  []string
	// run is the one the columns read, its config replaced per call: a
	// results.Run is kilobytes.
	run results.Run
}

func newAxisCells(axes []string) *axisCells {
	a := &axisCells{cols: make([]*results.Column, len(axes)), seen: make([]map[any]string, len(axes)), out: make([]string, len(axes))}
	for i, name := range axes {
		if c, err := results.LookupColumn(name, results.KindAxis); err == nil {
			a.cols[i] = &c
		}
		a.seen[i] = map[any]string{}
	}
	return a
}

// values is axisValues(*rc, axes); the slice is reused by the next call.
func (a *axisCells) values(rc *sweeps.RunConfig) []string {
	a.run.Config = *rc
	run := &a.run
	for i, c := range a.cols {
		if c == nil {
			a.out[i] = "?"
			continue
		}
		v := c.Value(run)
		switch v.(type) {
		case nil:
			a.out[i] = ""
		case string, bool, int64, float64, int:
			s, ok := a.seen[i][v]
			if !ok {
				s = fmt.Sprint(v)
				if len(a.seen[i]) < 1<<12 { // a bound on its memory
					a.seen[i][v] = s
				}
			}
			a.out[i] = s
		default:
			a.out[i] = fmt.Sprint(v)
		}
	}
	return a.out
}

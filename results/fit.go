package results

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/olekukonko/tablewriter/pkg/twwidth"
)

// MinWidth and MaxWidth bound ReportOptions.Width: narrower than MinWidth no
// table of a run is readable, and MaxWidth is past any screen.
const (
	MinWidth = 40
	MaxWidth = 100000
)

// fitPriority ranks the default figures by how long they stay when a table is
// cut to a width: the first stays longest. Figures not listed (asked for with
// --metric) go before these, the rightmost first; status, when shown, and the
// first figure of the table are never dropped.
var fitPriority = []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes", "mfu", "memory_saving",
	"step_time_s.median", "scaling_efficiency"}

// shortHeaders are the headings a table fitted to a width uses once the full
// ones are too wide: the axis names of run slugs (ws, bs, ac) and units kept (a
// byte column's unit is added to its heading: "peak MiB").
var shortHeaders = map[string]string{
	"world_size": "ws", "gpus_per_node": "gpn", "batch_per_device": "bs", "grad_accum": "accum",
	"global_batch": "gbs", "seq_len": "seq", "activation_checkpointing": "ac", "backward_prefetch": "prefetch",
	"forward_prefetch": "fwd_pf", "cpu_offload": "offload", "mixed_precision": "prec", "wrap_policy": "wrap",
	"warmup_steps": "warmup", "tokens_per_s_per_rank": "tok/s/rank", "tokens_per_s": "tok/s",
	"mfu": "MFU%", "step_time_s.median": "step s", "peak_mem_reserved_bytes": "peak",
	"peak_mem_allocated_bytes": "alloc", "memory_saving": "mem save%", "scaling_efficiency": "scale%",
	"tflops_per_rank": "TFLOP/s", "peak_rss_bytes": "RSS", ColumnExposedCommShare: "exp comm%",
}

// minCellWidth is how narrow an abbreviated text cell gets.
const minCellWidth = 8

// fit cuts a flat table (flatGrid's: run ID, the varying axes, the figures)
// to width terminal columns, in this order, each step only while the table is
// still too wide (the first three always):
//
//  1. the run ID goes (the axes tell the runs apart; unless two runs agree on
//     every axis), and so do axes that follow from the others (gpus_per_node
//     and global_batch beside world_size), and status when every run is ok
//     (a figure's cell of a run that is not ok shows its status anyway);
//  2. headings are abbreviated (shortHeaders);
//  3. figures are dropped, by fitPriority, never the first one;
//  4. the widest text cells are cut, with "…", down to minCellWidth.
//
// A row is never wrapped. What was left out is said in a note (itself wrapped
// to width), with --wide for the whole table. Should the table still be wider
// (a width below what the axes need), it is printed as it is.
func (g *grid) fit(width int, set *axisSet, runs []Run) {
	var hidden []string
	drop := func(j int) {
		name := g.cols[j].key
		if g.cols[j].kind == KindID {
			name = "run ID"
		}
		hidden = append(hidden, name)
		g.cols = slices.Delete(g.cols, j, j+1)
		for i := range g.rows {
			g.rows[i] = slices.Delete(g.rows[i], j, j+1)
		}
		g.setNotes() // a column's notes (its marks', a scaling efficiency's) go with it
	}
	needed := map[string]bool{}
	sep := set.separating(nil)
	for _, a := range sep {
		needed[a.col.Name] = true
	}
	_, groups := set.groups(sep)
	for j := len(g.cols) - 1; j >= 0; j-- {
		c := g.cols[j]
		switch {
		case c.kind == KindID && len(groups) == len(runs),
			c.kind == KindAxis && !needed[c.key],
			c.key == "status" && allOK(runs):
			drop(j)
		}
	}
	slices.Reverse(hidden)
	if g.width() > width {
		for j := range g.cols {
			if s, ok := shortHeaders[g.cols[j].key]; ok {
				if u := g.cols[j].unit; u != "" {
					s += " " + u
				}
				g.cols[j].header = s
			}
		}
	}
	for g.width() > width {
		j := g.dropCandidate()
		if j < 0 {
			break
		}
		drop(j)
	}
	for g.width() > width && g.cutWidestText() {
	}
	notes := g.notes
	if len(hidden) > 0 {
		notes = append(notes, "not shown: "+strings.Join(hidden, ", ")+" (--wide shows every column)")
	}
	g.notes = nil
	for _, n := range notes {
		g.notes = append(g.notes, wrapText(n, width)...)
	}
}

func allOK(runs []Run) bool {
	for i := range runs {
		if runs[i].Metrics.Status != StatusOK {
			return false
		}
	}
	return true
}

// dropCandidate is the figure to drop next (see fit), or -1.
func (g *grid) dropCandidate() int {
	first, figures := -1, 0
	for j, c := range g.cols {
		if c.kind == KindMetric || c.kind == KindDerived {
			if c.key == "status" {
				continue
			}
			if first < 0 {
				first = j
			}
			figures++
		}
	}
	if figures <= 1 {
		return -1
	}
	best, bestRank := -1, -1
	for j, c := range g.cols {
		if j == first || c.key == "status" || (c.kind != KindMetric && c.kind != KindDerived) {
			continue
		}
		key := c.key
		if slices.Contains(memoryFallbacks, key) {
			key = memoryFallbacks[0] // standing in for peak reserved memory, at its rank
		}
		rank := slices.Index(fitPriority, key)
		if rank < 0 {
			rank = len(fitPriority) + j // not a default figure: the rightmost goes first
		}
		if rank >= bestRank {
			best, bestRank = j, rank
		}
	}
	return best
}

// cutWidestText shortens the widest cells of the widest text column by one
// character (keeping its head and tail around "…") and reports whether it
// could.
func (g *grid) cutWidestText() bool {
	widths := g.colWidths()
	col := -1
	for j, c := range g.cols {
		if !c.right && widths[j] > minCellWidth && (col < 0 || widths[j] > widths[col]) {
			col = j
		}
	}
	if col < 0 {
		return false
	}
	w := widths[col] - 1
	if twwidth.Width(g.cols[col].header) > w {
		g.cols[col].header = ellipsis(g.cols[col].header, w)
	}
	for i := range g.rows {
		if twwidth.Width(g.rows[i][col].text) > w {
			g.rows[i][col].text = ellipsis(g.rows[i][col].text, w)
		}
	}
	return true
}

// ellipsis cuts s to w display columns: its head, "…", and its tail, as long
// as the head, since the ends tell apart values that share a long prefix
// (config paths, checkpoint names).
func ellipsis(s string, w int) string {
	if twwidth.Width(s) <= w {
		return s
	}
	r := []rune(s)
	tail := min(max(w-1, 0)/2, len(r))
	for head := min(w-1-tail, len(r)-tail); head >= 0; head-- {
		if t := string(r[:head]) + "…" + string(r[len(r)-tail:]); twwidth.Width(t) <= w {
			return t
		}
	}
	return "…"
}

// colWidths is each column's display width: the widest of its header and cells.
func (g *grid) colWidths() []int {
	w := make([]int, len(g.cols))
	for j, c := range g.cols {
		w[j] = twwidth.Width(c.header)
	}
	for _, row := range g.rows {
		for j, c := range row {
			w[j] = max(w[j], twwidth.Width(c.text))
		}
	}
	return w
}

// width is the display width of the table writeTable draws: each column's
// content with a space either side, and a rule before each and after the last.
func (g *grid) width() int {
	total := 1
	for _, w := range g.colWidths() {
		total += w + 3
	}
	return total
}

// WrapText breaks text into lines of at most width display columns at spaces,
// as the notes under a fitted table are (width 0: one line).
func WrapText(s string, width int) []string {
	if width <= 0 {
		return []string{s}
	}
	return wrapText(s, width)
}

// wrapText breaks a note into lines of at most width columns at spaces (a word
// longer than that keeps a line of its own).
func wrapText(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case twwidth.Width(line)+1+twwidth.Width(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// checkWidth bounds ReportOptions.Width where it enters.
func checkWidth(w int) error {
	if w != 0 && (w < MinWidth || w > MaxWidth) {
		return fmt.Errorf("table width %d: give %d to %d columns (or 0 for the whole table)", w, MinWidth, MaxWidth)
	}
	return nil
}

// idHash is the hash a run ID ends with (sweeps.RunConfig.ID: slug-hash).
var idHash = regexp.MustCompile(`-[0-9a-f]{16}$`)

// fitRunTable cuts a table whose first column names runs by ID (compare's) to
// width: the IDs lose their hash when the slugs alone are still all different,
// then the side headings are cut with "…" down to their cells' width, then the
// run column (cutWidestText).
// It reports whether the IDs lost their hash, for the caller's note.
func (g *grid) fitRunTable(width int) (hashless bool) {
	if g.width() <= width || len(g.cols) == 0 {
		return false
	}
	hashless = g.fitRunIDs()

	// A long side heading (a results path) goes first, as far as the cells
	// below it; then the run column.
	for j := range g.cols {
		for g.width() > width && g.cols[j].right {
			h := twwidth.Width(g.cols[j].header)
			if h <= minCellWidth || h < g.colWidths()[j] || g.cellsWidth(j) >= h {
				break
			}
			g.cols[j].header = ellipsis(g.cols[j].header, h-1)
		}
	}
	for g.width() > width && g.cutWidestText() {
	}
	return hashless
}

// fitRunIDs drops the hash of the run IDs in the first column when the slugs
// alone are still all different, and reports whether it did.
func (g *grid) fitRunIDs() bool {
	if len(g.cols) == 0 {
		return false
	}
	seen := map[string]bool{}
	short := make([]string, len(g.rows))
	for i, row := range g.rows {
		short[i] = idHash.ReplaceAllString(row[0].text, "")
		if seen[short[i]] {
			return false
		}
		seen[short[i]] = true
	}
	for i := range short {
		g.rows[i][0].text = short[i]
	}
	return true
}

// cellsWidth is the widest cell of column j, its heading aside.
func (g *grid) cellsWidth(j int) int {
	w := 0
	for _, row := range g.rows {
		w = max(w, twwidth.Width(row[j].text))
	}
	return w
}

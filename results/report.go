package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/pkg/twwidth"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
	"github.com/sourcegraph/conc/iter"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// Report formats.
const (
	FormatTable    = "table"    // a terminal table
	FormatMarkdown = "markdown" // a GitHub-flavoured Markdown table
	FormatCSV      = "csv"      // the report's cells, plain units, RFC 4180
	FormatJSON     = "json"     // the report's rows as objects keyed by column name
)

// Formats lists the report formats, the default first.
var Formats = []string{FormatTable, FormatMarkdown, FormatCSV, FormatJSON}

// DefaultMetrics are the figures a report shows when none are asked for. Of these,
// the ones unknown for every run shown are left out (status always stays), and
// exposed_comm_share unless a measured run has it (the sim predicts it for all).
var DefaultMetrics = []string{"status", "tokens_per_s_per_rank", "mfu", "step_time_s.median", ColumnExposedCommShare,
	"peak_mem_reserved_bytes", "memory_saving", "scaling_efficiency",
	"checkpoint_save_s", "checkpoint_load_s", "checkpoint_bytes", "resume_exact"}

// DefaultPivotMetric is the cell of a pivot (--rows/--cols) when no metric is asked for.
const DefaultPivotMetric = "tokens_per_s_per_rank"

// ReportOptions chooses what Report shows; the zero value is the default table.
type ReportOptions struct {
	// Rows and Cols are axis names. Both empty: one row per run, with the run ID and
	// the axes that vary across the runs. Otherwise a pivot: one row per combination
	// of the row axes, one column per combination of the column axes and metric.
	// Axes that vary but are named in neither are added to the rows where they are
	// needed to keep two runs out of one cell (axisSet.separating).
	Rows, Cols []string
	// Metrics are column names (metrics or derived figures); empty = DefaultMetrics,
	// or DefaultPivotMetric in a pivot.
	Metrics []string
	// Format is one of Formats; empty = table.
	Format string
	// Width, when positive, fits the one-row-per-run table (no Rows or Cols,
	// format table) to that many terminal columns: the columns that tell the runs
	// apart and the key figures, cut in the order fit documents, never a row
	// wrapped. 0 is the whole table; Markdown, CSV, JSON and pivots are never
	// cut. MinWidth to MaxWidth.
	Width int
}

// Report writes a comparison of runs. Statistics are computed before (Normalize,
// Derive); Report only selects, orders and formats. A cell that should hold a number
// holds the run's status instead when the run is not ok (oom, infeasible, ...);
// figures of runs the analytic model predicted are marked with * and a footnote.
// Tables show the units in the headers (%, and for bytes the KiB, MiB or GiB that
// suits the column's figures, ByteUnitFor); CSV and JSON keep plain units
// (bytes, fractions) and use the column names of the registry (Columns).
func Report(w io.Writer, runs []Run, opt ReportOptions) error {
	format := opt.Format
	if format == "" {
		format = FormatTable
	}
	if !contains(Formats, format) {
		return fmt.Errorf("unknown report format %q; valid formats: %s", opt.Format, strings.Join(Formats, ", "))
	}
	if err := checkWidth(opt.Width); err != nil {
		return err
	}
	var g *grid
	var err error
	if len(opt.Rows) == 0 && len(opt.Cols) == 0 {
		var set *axisSet
		g, set, err = flatGrid(runs, opt.Metrics)
		if err == nil && opt.Width > 0 && format == FormatTable {
			g.fit(opt.Width, set, runs)
		}
	} else {
		g, err = pivotGrid(runs, opt)
	}
	if err != nil {
		return err
	}
	switch format {
	case FormatCSV:
		return g.writeCSV(w)
	case FormatJSON:
		return g.writeJSON(w)
	default:
		return g.writeTable(w, format == FormatMarkdown)
	}
}

// grid is a report laid out, before rendering: every reporter prints the same cells.
type grid struct {
	title string // what the cells are, in a pivot
	cols  []gridCol
	rows  [][]gridCell
	notes []string
	// headNotes are the notes that do not follow from the cells (the predicted
	// backends'); setNotes puts them first in notes, then the cells' own.
	headNotes []string
}

// setNotes makes the grid's notes: headNotes, then those its cells call for
// (†, a scaling efficiency above 100%, NoiseMark, WarningMark). fit calls it
// again after dropping a column, so that a note leaves with its marks.
func (g *grid) setNotes() {
	g.notes = append(append(append(slices.Clone(g.headNotes), wholeRunNotes(g)...), superlinearNotes(g)...), marksNotes(g)...)
}

type gridCol struct {
	key    string // machine name: CSV header, JSON key
	header string // table heading
	right  bool   // numbers align right
	kind   ColumnKind
	unit   string // a byte column's unit (KiB, MiB, GiB), for its short heading
}

type gridCell struct {
	raw       any    // plain value for CSV/JSON; nil = unknown
	text      string // table text
	predicted bool
	wholeRun  bool // a throughput of a whole-run wall time (wholeRunMark)
	// superlinear is a scaling efficiency above 100% (superlinearSharded or
	// superlinearUnsharded), for the note that explains it; 0 otherwise.
	superlinear int
	// noisy and warned: the cell carries NoiseMark or WarningMark; noise and
	// warnings name the runs behind the mark and why, for the footnotes.
	noisy, warned bool
	noise         []cellNoise
	warnings      []cellWarnings
}

func resolveMetrics(names []string, def []string) ([]Column, error) {
	if len(names) == 0 {
		names = def
	}
	cols := make([]Column, 0, len(names))
	for _, n := range names {
		c, err := LookupColumn(n, KindMetric, KindDerived)
		if err != nil {
			return nil, fmt.Errorf("metric: %w", err)
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// metricCell formats the value of a metric or derived column for run r, byte
// figures in the column's unit u.
func metricCell(c *Column, r *Run, u ByteUnit, lookup func(string) *Run) gridCell {
	v := c.Value(r)
	if c.text {
		return gridCell{raw: v, text: displayValue(c, v, u)}
	}
	if r.Metrics.Status != StatusOK {
		return gridCell{raw: string(r.Metrics.Status), text: string(r.Metrics.Status)}
	}
	cell := gridCell{raw: v, text: displayValue(c, v, u), superlinear: superlinearKind(c, r, v)}
	if v == nil {
		return cell
	}
	if iv, ok := r.Metrics.CI[c.CI]; ok && c.CI != "" && iv.Center != 0 {
		pct := math.Max(iv.Hi-iv.Center, iv.Center-iv.Lo) / math.Abs(iv.Center) * 100
		if pct < 1 {
			cell.text += fmt.Sprintf(" ±%.1f%%", pct)
		} else {
			cell.text += fmt.Sprintf(" ±%.0f%%", pct)
		}
	}
	if r.Metrics.Predicted {
		cell.text += "*"
		cell.predicted = true
	}
	if wholeRunFigure(c, r) {
		cell.text += wholeRunMark
		cell.wholeRun = true
	}
	markCell(&cell, c, r, lookup)
	return cell
}

// runLookup finds a run by ID among runs, for the marks a derived figure takes
// from its baseline; built once per report.
func runLookup(runs []Run) func(string) *Run {
	byID := make(map[string]int, len(runs))
	for i := range runs {
		byID[runs[i].Config.ID] = i
	}
	return func(id string) *Run {
		if i, ok := byID[id]; ok && id != "" {
			return &runs[i]
		}
		return nil
	}
}

// wholeRunMark flags a throughput figure made of a whole run's wall time
// (Metrics.WholeRunWallTime), which is no steady-state figure.
const (
	wholeRunMark = "†"
	wholeRunNote = "† throughput over the whole run's wall time (start-up, warm-up, data loading included), not steady state: " +
		"expect it below a measured or predicted steady-state figure; a gap is no regression"
)

// wholeRunFigure reports whether column c of run r divides by a whole-run wall time.
func wholeRunFigure(c *Column, r *Run) bool {
	return r.Metrics.WholeRunWallTime && wholeRunColumn(c)
}

// wholeRunColumn reports whether column c divides by the wall time.
func wholeRunColumn(c *Column) bool {
	switch strings.TrimPrefix(c.Name, "ci.") {
	case "tokens_per_s", "tokens_per_s_per_rank", "tokens_per_s_per_rank.lo", "tokens_per_s_per_rank.hi",
		"mfu", "tflops_per_rank", "scaling_efficiency":
		return true
	}
	return false
}

// superlinearNote explains a sharded run's scaling efficiency above 100%, which
// readers take for a bug; unshardedSuperlinearNote a ddp or no_shard run's,
// where every rank still does the whole optimizer step, so sharding explains
// nothing.
const (
	superlinearNote = "scaling eff. above 100%: faster per rank than at the smallest world size " +
		"(sharding cuts each rank's optimizer work as 1/N; measured runs also vary)"
	unshardedSuperlinearNote = "scaling eff. above 100% for ddp/no_shard: every rank still does the whole optimizer step, " +
		"so the runs' own variation (or the machine) made it: measure again, with more steps or repeats"
)

// superlinear values of gridCell.superlinear.
const (
	superlinearSharded   = 1
	superlinearUnsharded = 2
)

// superlinearKind says whether column c of run r is a scaling efficiency that
// reads above 100.0, and whether the run shards its optimizer state.
func superlinearKind(c *Column, r *Run, v any) int {
	x, ok := v.(float64)
	if c.Name != "scaling_efficiency" || !ok || x < 1.0005 {
		return 0
	}
	if r.Config.Sharding == sweeps.DDP || r.Config.Sharding == sweeps.NoShard {
		return superlinearUnsharded
	}
	return superlinearSharded
}

// superlinearNotes is the footnote of a grid showing a scaling efficiency that
// reads above 100.0: the one that fits each kind of run shown.
func superlinearNotes(g *grid) []string {
	var sharded, unsharded bool
	for _, row := range g.rows {
		for _, c := range row {
			sharded = sharded || c.superlinear == superlinearSharded
			unsharded = unsharded || c.superlinear == superlinearUnsharded
		}
	}
	var out []string
	if sharded {
		out = append(out, superlinearNote)
	}
	if unsharded {
		out = append(out, unshardedSuperlinearNote)
	}
	return out
}

// wholeRunNotes is the footnote of a grid holding a † cell.
func wholeRunNotes(g *grid) []string {
	for _, row := range g.rows {
		for _, c := range row {
			if c.wholeRun {
				return []string{wholeRunNote}
			}
		}
	}
	return nil
}

// displayValue is the table text of a value in the column's display unit; byte
// figures in u, which the caller picks for the whole column (byteUnitOf).
func displayValue(c *Column, v any, u ByteUnit) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int64:
		if bytesColumn(c) {
			return u.Format(float64(x))
		}
		return strconv.FormatInt(x, 10)
	case float64:
		switch {
		case bytesColumn(c):
			return u.Format(x)
		case c.Unit == UnitFraction:
			return strconv.FormatFloat(x*100, 'f', 1, 64)
		}
		return fourDigits(x)
	}
	return fmt.Sprint(v)
}

// fourDigits shows about four significant digits without exponents for the usual
// range of step times, rates and losses.
func fourDigits(x float64) string {
	a := math.Abs(x)
	switch {
	case a >= 1e7:
		return strconv.FormatFloat(x, 'g', 4, 64)
	case a >= 1000:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 2, 64)
	case a >= 1:
		return strconv.FormatFloat(x, 'f', 3, 64)
	default:
		return strconv.FormatFloat(x, 'g', 4, 64)
	}
}

// plainValue is the CSV text of a value in the plain unit; empty = unknown.
func plainValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func flatGrid(runs []Run, metricNames []string) (*grid, *axisSet, error) {
	metrics, err := resolveMetrics(metricNames, DefaultMetrics)
	if err != nil {
		return nil, nil, err
	}
	if len(metricNames) == 0 {
		metrics = knownSomewhere(runs, metrics)
	}
	set := newAxisSet(runs)
	axes := set.varying()
	id, _ := LookupColumn("id")

	g := &grid{cols: []gridCol{{key: id.Name, header: id.Header, kind: KindID}}}
	for _, a := range axes {
		g.cols = append(g.cols, gridCol{key: a.col.Name, header: a.col.Header, right: a.numeric(), kind: KindAxis})
	}
	units := make([]ByteUnit, len(metrics))
	for j := range metrics {
		c := &metrics[j]
		units[j] = byteUnitOf(c, runs)
		gc := gridCol{key: c.Name, header: headerIn(c, units[j]), right: !c.text, kind: c.Kind}
		if bytesColumn(c) {
			gc.unit = units[j].Name
		}
		g.cols = append(g.cols, gc)
	}
	g.rows = make([][]gridCell, 0, len(runs))
	predicted := map[string]bool{}
	lookup := runLookup(runs)
	for _, i := range set.order(axes) {
		r := &runs[i]
		row := make([]gridCell, 0, len(g.cols))
		v := id.Value(r)
		row = append(row, gridCell{raw: v, text: displayValue(&id, v, GiB)})
		for _, a := range axes {
			k := a.rank[i]
			row = append(row, gridCell{raw: a.values[k], text: a.text[k]})
		}
		for j := range metrics {
			cell := metricCell(&metrics[j], r, units[j], lookup)
			if cell.predicted {
				predicted[r.Config.Backend] = true
			}
			row = append(row, cell)
		}
		g.rows = append(g.rows, row)
	}
	g.headNotes = predictedNote(predicted)
	g.setNotes()
	return g, set, nil
}

// memoryFallbacks are the default table's memory figure and, in order, what
// stands in for it when no run knows it: a CPU run has no allocator reserve, but
// its allocated peak (gotrain) or resident set (any backend) is its memory.
var memoryFallbacks = []string{"peak_mem_reserved_bytes", "peak_mem_allocated_bytes", "peak_rss_bytes"}

// knownSomewhere drops the default metrics no run has a value for (status
// stays), putting the first known of memoryFallbacks in peak reserved memory's
// place.
func knownSomewhere(runs []Run, metrics []Column) []Column {
	known := func(c *Column) bool {
		for i := range runs {
			if c.measuredDefault && runs[i].Metrics.Predicted {
				continue
			}
			if c.Value(&runs[i]) != nil {
				return true
			}
		}
		return false
	}
	asked := map[string]bool{}
	for _, c := range metrics {
		asked[c.Name] = true
	}
	var out []Column
	for _, c := range metrics {
		switch {
		case c.Name == "status" || known(&c):
			out = append(out, c)
		case c.Name == memoryFallbacks[0]:
			for _, name := range memoryFallbacks[1:] {
				f, _ := LookupColumn(name)
				if !known(&f) {
					continue
				}
				if !asked[name] { // else it has its own place already
					out = append(out, f)
				}
				break
			}
		}
	}
	return out
}

func predictedNote(backends map[string]bool) []string {
	if len(backends) == 0 {
		return nil
	}
	names := make([]string, 0, len(backends))
	for b := range backends {
		if b == "" {
			b = "unnamed"
		}
		names = append(names, b)
	}
	sort.Strings(names)
	return []string{fmt.Sprintf("* predicted (backend %s), not measured", strings.Join(names, ", "))}
}

func pivotGrid(runs []Run, opt ReportOptions) (*grid, error) {
	metrics, err := resolveMetrics(opt.Metrics, []string{DefaultPivotMetric})
	if err != nil {
		return nil, err
	}
	seen := map[string]string{}
	resolveAxes := func(names []string, where string) ([]Column, error) {
		var out []Column
		for _, n := range names {
			c, err := LookupColumn(n, KindAxis)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			if prev, dup := seen[n]; dup {
				return nil, fmt.Errorf("%s: axis %q is already in %s; name each axis once", where, n, prev)
			}
			seen[n] = where
			out = append(out, c)
		}
		return out, nil
	}
	rowCols, err := resolveAxes(opt.Rows, "rows")
	if err != nil {
		return nil, err
	}
	colCols, err := resolveAxes(opt.Cols, "cols")
	if err != nil {
		return nil, err
	}
	set := newAxisSet(runs)
	var rowAxes, colAxes []*axisValues
	for _, c := range rowCols {
		rowAxes = append(rowAxes, set.get(c))
	}
	for _, c := range colCols {
		colAxes = append(colAxes, set.get(c))
	}
	rowAxes = append(rowAxes, set.separating(append(append([]*axisValues(nil), rowAxes...), colAxes...))...)

	rowOf, rowFirst := set.groups(rowAxes)
	colOf, colFirst := set.groups(colAxes)
	cell := make(map[[2]int32]int, len(runs))
	for i := range runs {
		k := [2]int32{rowOf[i], colOf[i]}
		if j, dup := cell[k]; dup {
			return nil, fmt.Errorf("runs %s and %s fall in the same cell: they differ in no axis "+
				"(only in settings such as timeout); report them separately", runs[j].Config.ID, runs[i].Config.ID)
		}
		cell[k] = i
	}

	g := &grid{}
	for _, a := range rowAxes {
		g.cols = append(g.cols, gridCol{key: a.col.Name, header: a.col.Header, right: a.numeric()})
	}
	// One unit per metric over every cell, so a row reads across in one unit.
	units := make([]ByteUnit, len(metrics))
	headers := make([]string, len(metrics))
	for j := range metrics {
		units[j] = byteUnitOf(&metrics[j], runs)
		headers[j] = headerIn(&metrics[j], units[j])
	}
	for _, first := range colFirst {
		label, key := comboLabel(colAxes, first, " "), comboLabel(colAxes, first, ",")
		for j, m := range metrics {
			gc := gridCol{key: m.Name, header: headers[j], right: !m.text}
			switch {
			case len(colAxes) > 0 && len(metrics) == 1:
				gc.key, gc.header = m.Name+"["+key+"]", label
			case len(colAxes) > 0:
				gc.key, gc.header = m.Name+"["+key+"]", label+" "+headers[j]
			}
			g.cols = append(g.cols, gc)
		}
	}
	if len(colAxes) > 0 && len(metrics) == 1 {
		g.title = headers[0]
	}
	predicted := map[string]bool{}
	lookup := runLookup(runs)
	for ri, first := range rowFirst {
		row := make([]gridCell, 0, len(g.cols))
		for _, a := range rowAxes {
			k := a.rank[first]
			row = append(row, gridCell{raw: a.values[k], text: a.text[k]})
		}
		for ci := range colFirst {
			i, ok := cell[[2]int32{int32(ri), int32(ci)}]
			for j := range metrics {
				if !ok {
					row = append(row, gridCell{})
					continue
				}
				c := metricCell(&metrics[j], &runs[i], units[j], lookup)
				if c.predicted {
					predicted[runs[i].Config.Backend] = true
				}
				row = append(row, c)
			}
		}
		g.rows = append(g.rows, row)
	}
	g.headNotes = predictedNote(predicted)
	g.setNotes()
	return g, nil
}

// comboLabel names a tuple of axis values by the run that has it ("world_size=2").
func comboLabel(axes []*axisValues, run int, sep string) string {
	parts := make([]string, len(axes))
	for j, a := range axes {
		parts[j] = a.col.Name + "=" + plainValue(a.values[a.rank[run]])
	}
	return strings.Join(parts, sep)
}

// tableChunkRows is how many rows one tablewriter table renders. Large reports are
// cut into chunks rendered in parallel (tablewriter costs a few microseconds per
// cell, 100,000-run sweeps have millions) and joined; every cell is padded to its
// column's width beforehand, so each chunk lays out the columns identically and
// the joined text is the one table (TestChunkedTableIsOneTable).
var tableChunkRows = 4096

func (g *grid) writeTable(w io.Writer, markdown bool) error {
	headers := make([]string, len(g.cols))
	widths := make([]int, len(g.cols))
	aligns := make([]tw.Align, len(g.cols))
	for j, c := range g.cols {
		aligns[j] = tw.AlignLeft
		if c.right {
			aligns[j] = tw.AlignRight // Markdown writes it into the separator row
		}
		// Cells and notes may hold what a run wrote (its error line, a host or
		// GPU name): escaped, so that no control sequence reaches the terminal.
		headers[j] = termsafe.Line(c.header)
		if markdown {
			headers[j] = markdownEscape(headers[j])
		}
		widths[j] = twwidth.Width(headers[j])
	}
	texts := make([][]string, len(g.rows))
	for i, row := range g.rows {
		texts[i] = make([]string, len(row))
		for j, c := range row {
			t := termsafe.Line(c.text)
			if markdown {
				t = markdownEscape(t)
			}
			texts[i][j] = t
			widths[j] = max(widths[j], twwidth.Width(t))
		}
	}
	pad := func(s string, j int) string {
		n := widths[j] - twwidth.Width(s)
		switch {
		case n <= 0:
			return s
		case g.cols[j].right:
			return strings.Repeat(" ", n) + s
		default:
			return s + strings.Repeat(" ", n)
		}
	}
	for j := range headers {
		headers[j] = pad(headers[j], j)
	}

	var chunks [][][]string
	for start := 0; start < len(texts) || start == 0; start += tableChunkRows {
		end := min(start+tableChunkRows, len(texts))
		chunks = append(chunks, texts[start:end])
		if end == len(texts) {
			break
		}
	}
	outs := make([]bytes.Buffer, len(chunks))
	errs := make([]error, len(chunks))
	iter.ForEachIdx(chunks, func(k int, rows *[][]string) {
		for _, row := range *rows {
			for j := range row {
				row[j] = pad(row[j], j)
			}
		}
		errs[k] = renderChunk(&outs[k], headers, aligns, *rows, markdown, k == 0, k == len(chunks)-1)
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("render table: %w", err)
	}

	var buf bytes.Buffer
	if g.title != "" {
		fmt.Fprintf(&buf, "%s\n", g.title)
		if markdown {
			buf.WriteByte('\n')
		}
	}
	for k := range outs {
		buf.Write(outs[k].Bytes())
	}
	for _, n := range g.notes {
		n = termsafe.Text(n)
		if markdown {
			buf.WriteByte('\n')
			n = markdownEscape(n)
		}
		fmt.Fprintf(&buf, "%s\n", n)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// renderChunk renders rows (already padded) as one piece of a table: the first
// piece carries the header and the top border, the last the bottom border.
func renderChunk(buf *bytes.Buffer, headers []string, aligns []tw.Align, rows [][]string, markdown, first, last bool) error {
	borders := tw.Border{Left: tw.On, Right: tw.On, Top: tw.Off, Bottom: tw.Off}
	if first {
		borders.Top = tw.On
	}
	if last {
		borders.Bottom = tw.On
	}
	var r tw.Renderer = renderer.NewBlueprint(tw.Rendition{Borders: borders})
	if markdown {
		r = renderer.NewMarkdown()
	}
	t := tablewriter.NewTable(buf,
		tablewriter.WithRenderer(r),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: aligns}),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: aligns}),
	)
	if first {
		t.Header(headers)
	}
	if err := t.Bulk(rows); err != nil {
		return err
	}
	return t.Render()
}

// markdownEscape keeps a cell's text from ending the cell or turning into emphasis.
func markdownEscape(s string) string {
	if !strings.ContainsAny(s, `|*\`) {
		return s
	}
	return markdownEscaper.Replace(s)
}

var markdownEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`, `*`, `\*`)

// exportCells are the grid's cells as CSV and JSON reports hold them: each
// column's key and plain values, and after a column some of whose cells carry
// NoiseMark or WarningMark, a column key + MarksSuffix saying which ("noisy",
// "warning", "noisy,warning"; empty or null where a cell has none), since
// those formats have no footnotes.
func (g *grid) exportCells() ([]string, [][]any) {
	marked := make([]bool, len(g.cols))
	for _, row := range g.rows {
		for j := range row {
			marked[j] = marked[j] || row[j].noisy || row[j].warned
		}
	}
	var keys []string
	for j, c := range g.cols {
		keys = append(keys, c.key)
		if marked[j] {
			keys = append(keys, c.key+MarksSuffix)
		}
	}
	rows := make([][]any, len(g.rows))
	for i, row := range g.rows {
		out := make([]any, 0, len(keys))
		for j := range row {
			out = append(out, row[j].raw)
			if marked[j] {
				out = append(out, marksText(&row[j]))
			}
		}
		rows[i] = out
	}
	return keys, rows
}

func (g *grid) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	keys, rows := g.exportCells()
	if err := cw.Write(keys); err != nil {
		return err
	}
	rec := make([]string, len(keys))
	for _, row := range rows {
		for j, v := range row {
			rec[j] = plainValue(v)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeJSON writes an array with one object per row, keys in column order (a Go map
// would sort them).
func (g *grid) writeJSON(w io.Writer) error {
	names, rows := g.exportCells()
	keys := make([][]byte, len(names))
	for j, n := range names {
		k, err := json.Marshal(n)
		if err != nil {
			return err
		}
		keys[j] = k
	}
	var buf bytes.Buffer
	buf.WriteString("[")
	for i, row := range rows {
		if i > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n  {")
		for j, v := range row {
			if j > 0 {
				buf.WriteString(", ")
			}
			buf.Write(keys[j])
			buf.WriteString(": ")
			if err := appendJSONValue(&buf, v); err != nil {
				return fmt.Errorf("column %s: %w", names[j], err)
			}
		}
		buf.WriteString("}")
	}
	if len(rows) > 0 {
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	_, err := w.Write(buf.Bytes())
	return err
}

func appendJSONValue(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case int64:
		buf.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			buf.WriteString("null")
			return nil
		}
		buf.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// WriteTable draws rows of text under header with the renderer of every report
// (no cell wrapped; numbers aligned right): the CLI's other tables (plan, the
// dry run, backends) look like its run tables.
func WriteTable(w io.Writer, header []string, rows [][]string) error {
	return WriteTableFitted(w, header, rows, TableFit{})
}

// TableFit says how WriteTableFitted cuts a table to a terminal's width.
type TableFit struct {
	// Width is the terminal's columns, MinWidth to MaxWidth; 0 is the whole table.
	Width int
	// RunIDs says the first column holds run IDs: they lose their hash first,
	// when the slugs alone still tell the rows apart.
	RunIDs bool
	// Short maps headings to the abbreviations used once the table is too wide
	// (before any column goes).
	Short map[string]string
	// Drop names columns (by heading) that may be left out, the first first,
	// while the table is still too wide; then the widest text cells are cut with
	// "…". A row is never wrapped.
	Drop []string
}

// WriteTableFitted is WriteTable cut to fit.Width as the run tables are (the
// report's order: run IDs shortened, columns dropped, text cut), with a note
// under the table saying what is not shown and that --wide shows it.
func WriteTableFitted(w io.Writer, header []string, rows [][]string, fit TableFit) error {
	if err := checkWidth(fit.Width); err != nil {
		return err
	}
	g, err := textGrid(header, rows)
	if err != nil {
		return err
	}
	if fit.Width > 0 && g.width() > fit.Width {
		var notes, hidden []string
		if fit.RunIDs && g.fitRunIDs() {
			notes = append(notes, "run IDs without their hash (--wide shows them whole)")
		}
		if g.width() > fit.Width {
			for j := range g.cols {
				if s, ok := fit.Short[g.cols[j].key]; ok {
					g.cols[j].header = s
				}
			}
		}
		for _, name := range fit.Drop {
			if g.width() <= fit.Width {
				break
			}
			if j := slices.IndexFunc(g.cols, func(c gridCol) bool { return c.key == name }); j >= 0 {
				hidden = append(hidden, name)
				g.cols = slices.Delete(g.cols, j, j+1)
				for i := range g.rows {
					g.rows[i] = slices.Delete(g.rows[i], j, j+1)
				}
			}
		}
		for g.width() > fit.Width && g.cutWidestText() {
		}
		if len(hidden) > 0 {
			notes = append(notes, "not shown: "+strings.Join(hidden, ", ")+" (--wide shows every column)")
		}
		for _, n := range notes {
			g.notes = append(g.notes, wrapText(n, fit.Width)...)
		}
	}
	return g.writeTable(w, false)
}

// textGrid lays out rows of text under header.
func textGrid(header []string, rows [][]string) (*grid, error) {
	g := &grid{cols: make([]gridCol, len(header))}
	for j, h := range header {
		g.cols[j] = gridCol{key: h, header: h, right: numericColumn(rows, j)}
	}
	for _, row := range rows {
		if len(row) != len(header) {
			return nil, fmt.Errorf("render table: a row has %d cells for %d columns", len(row), len(header))
		}
		cells := make([]gridCell, len(row))
		for j, s := range row {
			cells[j] = gridCell{raw: s, text: s}
		}
		g.rows = append(g.rows, cells)
	}
	return g, nil
}

// numericColumn says whether every known cell of column j is a number.
func numericColumn(rows [][]string, j int) bool {
	known := false
	for _, row := range rows {
		if j >= len(row) || row[j] == "" || row[j] == "-" {
			continue
		}
		if _, err := strconv.ParseFloat(row[j], 64); err != nil {
			return false
		}
		known = true
	}
	return known
}

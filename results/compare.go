package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/perf/benchmath"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// MinStatRepeats is how many repeats each side needs before a comparison is
// statistically backed: the fewest samples for which benchmath gives the median a
// finite 95% confidence interval (benchstat's "need >= 6 samples").
const MinStatRepeats = 6

// DefaultAlpha is the significance level of comparisons (benchstat's default).
const DefaultAlpha = 0.05

// DefaultCompareMetrics are the figures Compare shows when none are asked for; of
// these, the ones unknown on both sides are left out, and exposed_comm_s unless
// a measured run has it (the sim predicts it for all: sim against sim stays
// as it was, sim against measured shows the overlap model's error).
var DefaultCompareMetrics = []string{"tokens_per_s_per_rank", "step_time_s.median", "mfu",
	"peak_mem_allocated_bytes", "peak_mem_reserved_bytes", SampleExposedCommS}

// LoadPath reads runs from path: a results directory (as Load) or a file written by
// `fsdpbench export --format json`. Runs from a JSON file keep the derived figures
// stored with them.
func LoadPath(path string) ([]Run, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("results %s: %w (give a results directory or a file from `fsdpbench export --format json`)", path, err)
	}
	if st.IsDir() {
		return Load(path)
	}
	data, err := input.ReadJSON(path, input.Export)
	if err != nil {
		return nil, fmt.Errorf("results %s: %w", path, err)
	}
	var exported []ExportedRun
	if err := json.Unmarshal(data, &exported); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := lineCol(data, se.Offset)
			return nil, fmt.Errorf("%s:%d:%d: %v (expected the array `fsdpbench export --format json` writes)", path, line, col, err)
		}
		return nil, fmt.Errorf("%s: %w (expected the array `fsdpbench export --format json` writes)", path, err)
	}
	runs := make([]Run, len(exported))
	seen := map[[2]string]int{}
	for i, e := range exported {
		if e.Config.ID == "" {
			return nil, fmt.Errorf("%s: element %d has no config.id; export the runs again with `fsdpbench export --format json`", path, i)
		}
		at := fmt.Sprintf("%s: element %d", path, i)
		if j, ok := seen[[2]string{e.Config.Sweep, e.Config.ID}]; ok {
			return nil, fmt.Errorf("%s repeats run %s of sweep %q (element %d); export the runs again with `fsdpbench export --format json`",
				at, clip(e.Config.ID), clip(e.Config.Sweep), j)
		}
		seen[[2]string{e.Config.Sweep, e.Config.ID}] = i
		runs[i] = Run{Config: e.Config, Metrics: e.Metrics, Derived: e.Derived}
		if err := CheckRun(&runs[i]); err != nil {
			var ie *InvalidRunError
			if errors.As(err, &ie) {
				ie.Path, ie.Hint = at, "export the runs again with `fsdpbench export --format json`, or drop this element"
			}
			return nil, err
		}
	}
	return runs, nil
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(data []byte, off int64) (int, int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// Pair is one run matched across a baseline and a current set, by run ID (the hash
// of its training configuration). Baseline or Current is nil when the run is on one
// side only.
type Pair struct {
	// Key is the run ID, or sweep/ID where the ID occurs in more than one sweep.
	Key      string
	Baseline *Run
	Current  *Run
}

// MatchRuns pairs the runs of baseline and current by run ID. Every run of either
// side is in exactly one pair: baseline order first, then runs only in current.
//
// An ID held by several sweeps on a side (one results directory holding two sweeps
// of the same spec) is matched by sweep and ID first; what is left is matched by ID
// where the ID is left once on each side. An ID still left on one side several times
// and on the other side at all cannot be matched without guessing: the error names
// it and the sweeps, and says to give one sweep's directory.
func MatchRuns(baseline, current []Run) ([]Pair, error) {
	type sweepID struct{ sweep, id string }
	count := map[string]int{}
	for _, side := range [][]Run{baseline, current} {
		seen := map[string]bool{}
		for i := range side {
			id := side[i].Config.ID
			if !seen[id] {
				seen[id] = true
				continue
			}
			count[id] = 2 // the ID is held by several sweeps of one side
		}
	}
	key := func(r *Run) string {
		if count[r.Config.ID] > 1 {
			return r.Config.Sweep + "/" + r.Config.ID
		}
		return r.Config.ID
	}
	var pairs []Pair
	at := map[sweepID]int{}
	for i := range baseline {
		k := sweepID{baseline[i].Config.Sweep, baseline[i].Config.ID}
		if _, ok := at[k]; ok {
			continue // the same sweep/ID twice: Load and LoadPath refuse that
		}
		at[k] = len(pairs)
		pairs = append(pairs, Pair{Key: key(&baseline[i]), Baseline: &baseline[i]})
	}
	var rest []int // current runs with no baseline run of the same sweep and ID
	for i := range current {
		k := sweepID{current[i].Config.Sweep, current[i].Config.ID}
		if j, ok := at[k]; ok && pairs[j].Current == nil {
			pairs[j].Current = &current[i]
			continue
		}
		rest = append(rest, i)
	}
	// The runs left on each side, by ID.
	leftBase := map[string][]int{}
	for j := range pairs {
		if pairs[j].Current == nil {
			leftBase[pairs[j].Baseline.Config.ID] = append(leftBase[pairs[j].Baseline.Config.ID], j)
		}
	}
	leftCur := map[string][]int{}
	for _, i := range rest {
		leftCur[current[i].Config.ID] = append(leftCur[current[i].Config.ID], i)
	}
	for _, i := range rest {
		id := current[i].Config.ID
		bs, cs := leftBase[id], leftCur[id]
		switch {
		case len(bs) == 1 && len(cs) == 1:
			pairs[bs[0]].Current = &current[i]
			continue
		case len(bs) > 0 && len(cs) > 0:
			sweepsOf := func(rs []string) string { return strings.Join(rs, ", ") }
			var bn, cn []string
			for _, j := range bs {
				bn = append(bn, strconv.Quote(pairs[j].Baseline.Config.Sweep))
			}
			for _, c := range cs {
				cn = append(cn, strconv.Quote(current[c].Config.Sweep))
			}
			return nil, fmt.Errorf("run %s is in sweeps %s of the baseline and %s of the current results: "+
				"which to compare with which cannot be told; give one sweep's directory on each side (<results>/<sweep>)",
				clip(id), sweepsOf(bn), sweepsOf(cn))
		}
		pairs = append(pairs, Pair{Key: key(&current[i]), Current: &current[i]})
	}
	return pairs, nil
}

// SideStat is one run's figure for one metric, as a comparison sees it.
type SideStat struct {
	// Value is the headline figure (metrics.json; Column.Value).
	Value float64 `json:"value"`
	// N is the number of per-repeat samples; with N >= MinStatRepeats, Center, Lo and
	// Hi are the median and its 95% CI (benchmath.AssumeNothing, as benchstat). With
	// fewer, Center is the median and Lo = Hi = Center (no finite interval).
	N      int       `json:"n"`
	Center float64   `json:"center"`
	Lo     float64   `json:"lo"`
	Hi     float64   `json:"hi"`
	sample []float64 // nil without per-repeat samples
}

// Backed reports whether the figure has enough repeats for statistics.
func (s *SideStat) Backed() bool { return s != nil && s.N >= MinStatRepeats }

// pctRange is the CI's half-width in percent of the centre, as benchstat prints it.
func (s *SideStat) pctRange() string {
	return benchmath.Summary{Center: s.Center, Lo: s.Lo, Hi: s.Hi}.PctRangeString()
}

// sideStat reads column c of run r; nil when the run is not ok or the figure unknown.
func sideStat(c *Column, r *Run) *SideStat {
	if r == nil || r.Metrics.Status != StatusOK {
		return nil
	}
	v, ok := numeric(c.Value(r))
	if !ok {
		return nil
	}
	s := &SideStat{Value: v}
	name := c.CI
	if name == "" {
		name = c.Name
	}
	withSamples(s, r.Metrics.Samples[name])
	return s
}

// numeric converts a column value to float64; false for text, flags and unknowns.
func numeric(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x)
	}
	return 0, false
}

// Delta is the change of one metric between a baseline and a current run.
type Delta struct {
	Metric   string    `json:"metric"`
	Baseline *SideStat `json:"baseline,omitempty"`
	Current  *SideStat `json:"current,omitempty"`
	// Change is current / baseline - 1: of the medians when Backed, else of the
	// headline figures. Nil when either side is unknown or the baseline is 0.
	Change *float64 `json:"change,omitempty"`
	// Backed is true when both sides have at least MinStatRepeats samples; then P is
	// the Mann-Whitney U test's p-value and Significant says P <= alpha.
	Backed      bool     `json:"backed"`
	P           *float64 `json:"p,omitempty"`
	Significant bool     `json:"significant"`
	// PredErr is predicted / measured − 1 when one side is the analytic model's
	// prediction and the other a measurement (Comparison.PredictedSide).
	PredErr *float64 `json:"pred_err,omitempty"`
}

// compareMetric computes the change of column c from run b to run cur.
func compareMetric(c *Column, b, cur *Run, alpha float64) Delta {
	return deltaOf(c.Name, sideStat(c, b), sideStat(c, cur), alpha)
}

// deltaOf computes the change of metric from side b to side cur (nil: unknown).
func deltaOf(metric string, b, cur *SideStat, alpha float64) Delta {
	d := Delta{Metric: metric, Baseline: b, Current: cur}
	if d.Baseline == nil || d.Current == nil {
		return d
	}
	base, now := d.Baseline.Value, d.Current.Value
	if d.Baseline.Backed() && d.Current.Backed() {
		d.Backed = true
		th := benchmath.Thresholds{CompareAlpha: alpha}
		cmp := benchmath.AssumeNothing.Compare(benchmath.NewSample(d.Baseline.sample, &th), benchmath.NewSample(d.Current.sample, &th))
		d.P = F64(cmp.P)
		d.Significant = !(cmp.P > alpha) // benchstat's FormatDelta: "~" only when P > alpha
		base, now = d.Baseline.Center, d.Current.Center
	}
	if base != 0 {
		// A tiny baseline can overflow the ratio; JSON holds no infinity, and the
		// largest float says "beyond any limit" as well.
		d.Change = F64(max(-math.MaxFloat64, min(math.MaxFloat64, now/base-1)))
	}
	return d
}

// CompareOptions chooses what Compare shows.
type CompareOptions struct {
	// Metrics are column names (metrics or derived figures); empty =
	// DefaultCompareMetrics, less those unknown on both sides.
	Metrics []string
	// Alpha is the significance level; 0 = DefaultAlpha.
	Alpha float64
	// BaselineName and CurrentName label the sides (the paths, as given).
	BaselineName, CurrentName string
}

// Comparison is every matched run's change in every metric: what `fsdpbench
// compare` prints, benchstat style.
type Comparison struct {
	Baseline string          `json:"baseline"`
	Current  string          `json:"current"`
	Alpha    float64         `json:"alpha"`
	Metrics  []string        `json:"metrics"`
	Rows     []ComparisonRow `json:"rows"`
	// Geomeans holds, per metric, the geometric means over the runs ok on both sides.
	Geomeans []Geomean `json:"geomeans"`
	// PredictedSide is "baseline" or "current" when that side's runs are all the
	// analytic model's predictions and the other side's all measurements: the
	// comparison is then of predicted against measured, and each Delta carries
	// PredErr.
	PredictedSide string `json:"predicted_side,omitempty"`
	// MeanAbsPredErr holds, per metric, the mean |PredErr| over the runs that
	// have one (with PredictedSide), whole-run (†) figures left out.
	MeanAbsPredErr []*float64 `json:"mean_abs_pred_err,omitempty"`
	// Renamed lists, "old → new", the baseline runs stored under an ID from
	// before sweeps.WorkloadIDChange that the current results hold under its
	// new ID: their rows are missing and new, and a note says why.
	Renamed []string `json:"renamed,omitempty"`
	cols    []Column
	width   int // see Fit
}

// Fit makes the text tables fit width terminal columns (0: whole; MinWidth to
// MaxWidth): where a table is wider, run IDs lose their hash when the readable
// slugs alone tell the rows apart, then the run column and the side headings are
// cut with "…" (fitRunTable). Markdown and JSON are never cut.
func (c *Comparison) Fit(width int) error {
	if err := checkWidth(width); err != nil {
		return err
	}
	c.width = width
	return nil
}

// ComparisonRow is one run (one Pair) of a Comparison.
type ComparisonRow struct {
	Run            string  `json:"run"`
	Sweep          string  `json:"sweep"`
	BaselineStatus Status  `json:"baseline_status,omitempty"` // empty: not in the baseline
	CurrentStatus  Status  `json:"current_status,omitempty"`  // empty: not in the current set
	Deltas         []Delta `json:"deltas"`                    // one per metric, in Comparison.Metrics order
	// Differs names what the paired runs differ in that says they may not run
	// the same workload (sweeps.Differences): the backend, the launcher, the
	// script, the model's definition. Tables mark the change ≠ and say it.
	Differs []string `json:"differs,omitempty"`
	wholeRun
	predictedMarks
	figureMarks
}

// predictedMarks says which sides' figures the analytic model predicted
// (Metrics.Predicted): tables mark those figures * and add the footnote, as
// report does.
type predictedMarks struct {
	BaselinePredicted bool `json:"baseline_predicted,omitempty"`
	CurrentPredicted  bool `json:"current_predicted,omitempty"`
	// backends of the predicted sides, for the footnote
	baselineBackend, currentBackend string
}

// wholeRun says which sides' throughput divides by a whole run's wall time
// (Metrics.WholeRunWallTime): tables mark those figures † and add the footnote.
type wholeRun struct {
	BaselineWholeRun bool `json:"baseline_whole_run_wall_time,omitempty"`
	CurrentWholeRun  bool `json:"current_whole_run_wall_time,omitempty"`
}

// Geomean is the geometric mean of one metric over the runs present and ok on both
// sides with positive figures (as benchstat's geomean row).
type Geomean struct {
	Metric   string   `json:"metric"`
	Runs     int      `json:"runs"`
	Baseline *float64 `json:"baseline,omitempty"`
	Current  *float64 `json:"current,omitempty"`
	// Change is the geometric mean of the per-run ratios, minus 1.
	Change *float64 `json:"change,omitempty"`
}

// Compare matches baseline and current runs by run ID and computes the change of
// each metric per run and its geometric mean. Statistics follow benchstat: with at
// least MinStatRepeats samples per side, medians with 95% CIs and a Mann-Whitney U
// test; with fewer, the headline figures' ratio, marked as not statistically backed.
func Compare(baseline, current []Run, opt CompareOptions) (*Comparison, error) {
	alpha := opt.Alpha
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if !(alpha > 0 && alpha < 1) {
		return nil, fmt.Errorf("alpha %v: give a significance level between 0 and 1, such as 0.05", alpha)
	}
	cols, err := resolveMetrics(opt.Metrics, DefaultCompareMetrics)
	if err != nil {
		return nil, err
	}
	for _, c := range cols {
		if c.text {
			return nil, fmt.Errorf("metric %q is text, not a figure; compare numeric metrics such as tokens_per_s_per_rank", c.Name)
		}
	}
	if len(opt.Metrics) == 0 {
		cols = knownSomewhere(append(append([]Run(nil), baseline...), current...), cols)
	}
	cmp := &Comparison{Baseline: opt.BaselineName, Current: opt.CurrentName, Alpha: alpha, cols: cols}
	for _, c := range cols {
		cmp.Metrics = append(cmp.Metrics, c.Name)
	}
	pairs, err := MatchRuns(baseline, current)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		row := ComparisonRow{Run: p.Key}
		if p.Baseline != nil {
			row.BaselineStatus, row.Sweep = p.Baseline.Metrics.Status, p.Baseline.Config.Sweep
			row.BaselineWholeRun = p.Baseline.Metrics.WholeRunWallTime
			row.BaselinePredicted, row.baselineBackend = p.Baseline.Metrics.Predicted, p.Baseline.Config.Backend
		}
		if p.Current != nil {
			row.CurrentStatus, row.Sweep = p.Current.Metrics.Status, p.Current.Config.Sweep
			row.CurrentWholeRun = p.Current.Metrics.WholeRunWallTime
			row.CurrentPredicted, row.currentBackend = p.Current.Metrics.Predicted, p.Current.Config.Backend
		}
		row.Differs = pairDifferences(p)
		row.figureMarks = marksOfPair(p)
		for j := range cols {
			row.Deltas = append(row.Deltas, compareMetric(&cols[j], p.Baseline, p.Current, alpha))
		}
		cmp.Rows = append(cmp.Rows, row)
	}
	_, cmp.Renamed = renamedPairs(pairs)
	for j := range cols {
		g := Geomean{Metric: cols[j].Name}
		var lb, lc, lr float64
		for _, row := range cmp.Rows {
			d := row.Deltas[j]
			if d.Baseline == nil || d.Current == nil || d.Change == nil {
				continue
			}
			b, c := d.Baseline.Center, d.Current.Center
			if b <= 0 || c <= 0 {
				continue
			}
			lb, lc, lr = lb+math.Log(b), lc+math.Log(c), lr+math.Log(c/b)
			g.Runs++
		}
		if g.Runs > 0 {
			n := float64(g.Runs)
			g.Baseline, g.Current, g.Change = F64(math.Exp(lb/n)), F64(math.Exp(lc/n)), F64(math.Exp(lr/n)-1)
		}
		cmp.Geomeans = append(cmp.Geomeans, g)
	}
	cmp.PredictedSide = predictedSide(pairs)
	if cmp.PredictedSide != "" {
		for j := range cols {
			var sum float64
			n := 0
			for i := range cmp.Rows {
				d := &cmp.Rows[i].Deltas[j]
				if d.Change == nil {
					continue
				}
				e := *d.Change
				if cmp.PredictedSide == "baseline" {
					e = 1/(1+e) - 1 // baseline / current − 1
				}
				if math.IsInf(e, 0) || math.IsNaN(e) {
					continue
				}
				d.PredErr = F64(e)
				// A whole-run (†) figure is no steady state: its error is the
				// start-up's as much as the model's, and stays out of the mean.
				if row := &cmp.Rows[i]; wholeRunColumn(&cols[j]) && (row.BaselineWholeRun || row.CurrentWholeRun) {
					continue
				}
				sum += math.Abs(e)
				n++
			}
			var mean *float64
			if n > 0 {
				mean = F64(sum / float64(n))
			}
			cmp.MeanAbsPredErr = append(cmp.MeanAbsPredErr, mean)
		}
	}
	return cmp, nil
}

// predictedSide says which side of the pairs holds only predictions while the
// other holds only measurements ("" when neither, or when a side has no ok run).
func predictedSide(pairs []Pair) string {
	var base, cur [2]int // [predicted, measured] ok runs
	for _, p := range pairs {
		for _, side := range []struct {
			r *Run
			n *[2]int
		}{{p.Baseline, &base}, {p.Current, &cur}} {
			if side.r == nil || side.r.Metrics.Status != StatusOK {
				continue
			}
			if side.r.Metrics.Predicted {
				side.n[0]++
			} else {
				side.n[1]++
			}
		}
	}
	switch {
	case base[0] > 0 && base[1] == 0 && cur[1] > 0 && cur[0] == 0:
		return "baseline"
	case cur[0] > 0 && cur[1] == 0 && base[1] > 0 && base[0] == 0:
		return "current"
	}
	return ""
}

// Write renders the comparison: table and markdown print one table per metric
// (run, baseline, current, change), benchstat style; json the Comparison itself.
func (c *Comparison) Write(w io.Writer, format string) error {
	switch format {
	case "", FormatTable, FormatMarkdown:
		return c.writeTables(w, format == FormatMarkdown)
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	return fmt.Errorf("unknown compare format %q; valid formats: table, markdown, json", format)
}

// Marks of the change column. notBackedMark flags a change computed from fewer
// repeats than statistics need.
const (
	notBackedMark = "¹"
	notBackedNote = "¹ not statistically backed: fewer than 6 repeats on a side, so the change is the ratio of the headline figures"
	noChangeMark  = "~"
	noChangeNote  = "~ no significant change (Mann-Whitney U, p > %.2f)"
)

func (c *Comparison) writeTables(w io.Writer, markdown bool) error {
	base, cur := sideLabel(c.Baseline, "baseline"), sideLabel(c.Current, "current")
	var buf bytes.Buffer
	usedNotBacked, usedNoChange, hashless, usedWholeRun := false, false, false, false
	predicted := map[string]bool{} // backends of the figures marked *
	var markedCells [][]gridCell   // the figures' cells, for the ? and ! notes
	for j := range c.cols {
		col := &c.cols[j]
		changeHeader := "vs base"
		if c.PredictedSide != "" {
			changeHeader = "pred err"
		}
		unit := c.byteUnit(j)
		g := &grid{title: headerIn(col, unit), cols: []gridCol{{key: "run", header: "run"}, {key: "baseline", header: base, right: true},
			{key: "current", header: cur, right: true}, {key: "change", header: changeHeader, right: true}}}
		for _, row := range c.Rows {
			d := row.Deltas[j]
			cells := []gridCell{{text: row.Run}, {text: statText(col, d.Baseline, row.BaselineStatus, unit)},
				{text: statText(col, d.Current, row.CurrentStatus, unit)}}
			for i, whole := range []bool{row.BaselineWholeRun && row.BaselineStatus == StatusOK && d.Baseline != nil,
				row.CurrentWholeRun && row.CurrentStatus == StatusOK && d.Current != nil} {
				if whole && wholeRunColumn(col) {
					cells[1+i].text += wholeRunMark
					usedWholeRun = true
				}
			}
			for i, side := range []struct {
				predicted, shown bool
				backend          string
			}{{row.BaselinePredicted, row.BaselineStatus == StatusOK && d.Baseline != nil, row.baselineBackend},
				{row.CurrentPredicted, row.CurrentStatus == StatusOK && d.Current != nil, row.currentBackend}} {
				if side.predicted && side.shown {
					cells[1+i].text += "*"
					predicted[side.backend] = true
				}
			}
			row.mark(cells[1:3], col, d)
			markedCells = append(markedCells, cells[1:3])
			change := changeText(d, row)
			if d.PredErr != nil {
				change = fmt.Sprintf("%+.2f%%", *d.PredErr*100)
			}
			usedNotBacked = usedNotBacked || strings.HasSuffix(change, notBackedMark)
			usedNoChange = usedNoChange || strings.HasPrefix(change, noChangeMark)
			if len(row.Differs) > 0 && d.Change != nil {
				change += " " + differsMark
			}
			cells = append(cells, gridCell{text: change})
			g.rows = append(g.rows, cells)
		}
		gm := c.Geomeans[j]
		gcells := []gridCell{{text: "geomean"}, {text: "-"}, {text: "-"}, {text: "-"}}
		if gm.Runs > 0 {
			gcells[1].text = displayValue(col, *gm.Baseline, unit)
			gcells[2].text = displayValue(col, *gm.Current, unit)
			ch := *gm.Change
			if c.PredictedSide == "baseline" {
				ch = 1/(1+ch) - 1
			}
			gcells[3].text = fmt.Sprintf("%+.2f%%", ch*100)
		}
		g.rows = append(g.rows, gcells)
		if c.PredictedSide != "" {
			mean := "-"
			if m := c.MeanAbsPredErr[j]; m != nil {
				mean = fmt.Sprintf("%.2f%%", *m*100)
			}
			g.rows = append(g.rows, []gridCell{{text: "mean |pred err|"}, {text: "-"}, {text: "-"}, {text: mean}})
		}
		if j > 0 {
			buf.WriteByte('\n')
		}
		if markdown {
			g.title = "#### " + g.title
		} else if c.width > 0 && g.fitRunTable(c.width) {
			hashless = true
		}
		if err := g.writeTable(&buf, markdown); err != nil {
			return err
		}
	}
	notes := predictedNote(predicted)
	if c.PredictedSide != "" {
		notes = append(notes, fmt.Sprintf("pred err = predicted / measured - 1; the %s side is the analytic model's prediction", c.PredictedSide))
	}
	if usedNoChange {
		notes = append(notes, fmt.Sprintf(noChangeNote, c.Alpha))
	}
	if usedNotBacked {
		notes = append(notes, notBackedNote)
	}
	if usedWholeRun {
		notes = append(notes, wholeRunNote)
	}
	notes = append(notes, marksNotes(&grid{rows: markedCells})...)
	if hashless {
		notes = append(notes, "run IDs without their hash (--wide shows them whole)")
	}
	for _, row := range c.Rows {
		if len(row.Differs) > 0 {
			notes = append(notes, differsMark+" "+row.Run+": "+differsText(row.Differs))
		}
	}
	for _, r := range c.Renamed {
		notes = append(notes, "run IDs changed in "+sweeps.WorkloadIDChange+" for runs with a user script, command or model file: "+r+
			" (missing and new above); measure the baseline again with this version to compare them")
	}
	if c.width > 0 && !markdown {
		var wrapped []string
		for _, n := range notes {
			wrapped = append(wrapped, wrapText(n, c.width)...)
		}
		notes = wrapped
	}
	for _, n := range notes {
		if markdown {
			buf.WriteByte('\n')
		}
		fmt.Fprintln(&buf, n)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// sideLabel names a side in a table heading.
func sideLabel(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// statText is one side's cell: the figure (± its CI when backed), or why there is
// none; byte figures in u.
func statText(c *Column, s *SideStat, st Status, u ByteUnit) string {
	switch {
	case st == "":
		return "missing"
	case st != StatusOK:
		return string(st)
	case s == nil:
		return "-"
	case s.Backed():
		return displayValue(c, s.Center, u) + " ± " + s.pctRange()
	}
	return displayValue(c, s.Value, u)
}

// byteUnit is the unit of metric j's table: that of its largest figure shown.
func (c *Comparison) byteUnit(j int) ByteUnit {
	var vals []float64
	for _, row := range c.Rows {
		for _, side := range []struct {
			s  *SideStat
			st Status
		}{{row.Deltas[j].Baseline, row.BaselineStatus}, {row.Deltas[j].Current, row.CurrentStatus}} {
			if side.s != nil && side.st == StatusOK { // a run not ok shows its status
				vals = append(vals, side.s.Value, side.s.Center)
			}
		}
	}
	return byteUnitOfValues(vals)
}

// changeText is the "vs base" cell, as benchstat writes it: "-10.00% (p=0.002 n=6)",
// "~ (p=0.485 n=6)", or the change marked as not statistically backed.
func changeText(d Delta, row ComparisonRow) string {
	switch {
	case row.BaselineStatus == "":
		return "new"
	case row.CurrentStatus == "":
		return "missing"
	case row.BaselineStatus == StatusOK && row.CurrentStatus != StatusOK:
		return "was ok, now " + string(row.CurrentStatus)
	case row.BaselineStatus != StatusOK && row.CurrentStatus == StatusOK:
		return "now ok, was " + string(row.BaselineStatus)
	case d.Change == nil:
		return "-"
	case !d.Backed:
		return fmt.Sprintf("%+.2f%% %s", *d.Change*100, notBackedMark)
	}
	n := strconv.Itoa(d.Baseline.N)
	if d.Baseline.N != d.Current.N {
		n = fmt.Sprintf("%d+%d", d.Baseline.N, d.Current.N)
	}
	p := ""
	if *d.P != 0 {
		p = fmt.Sprintf("p=%.3f ", *d.P)
	}
	if !d.Significant {
		return fmt.Sprintf("%s (%sn=%s)", noChangeMark, p, n)
	}
	return fmt.Sprintf("%+.2f%% (%sn=%s)", *d.Change*100, p, n)
}
